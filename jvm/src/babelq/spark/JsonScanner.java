package babelq.spark;

import java.nio.charset.StandardCharsets;

/**
 * A strict, allocation-light JSON scanner over UTF-8 bytes, with the core codec's rules.
 *
 * <p>It accepts exactly what {@code babelq.envelope.decode} accepts as JSON, or gives up: valid
 * UTF-8 inside strings (no overlongs, no encoded surrogates), no control characters in strings,
 * no lone surrogate escapes, RFC 8259 numbers only (no NaN, no leading zeros) and none that
 * only fits as infinity. Where the core's verdict is certainly poison and Spark's parser would
 * say otherwise (NaN, Infinity, a number beyond a double, an integer longer than Python reads)
 * it says so ({@link Poison}); a lone surrogate escape sets {@link #loneSurrogate}. It gives up
 * ({@link Unsure}) on anything else it does not vouch for, which includes every other malformed
 * body and nesting deeper than {@link #MAX_DEPTH}; the caller then lets the exact path decide,
 * so giving up is always safe.
 *
 * <p>Members of an object are reported through {@link #object}: the caller gets each key's
 * position and the value's {@link Value} (kind and extent), so it can keep the last occurrence
 * of the keys it cares about, as Python's {@code json} does.
 */
final class JsonScanner {
  static final int MAX_DEPTH = 256;

  /**
   * The envelope's nesting limit, the envelope object being level 1 (the core codec's
   * {@code babelq.envelope.constants.MAX_DEPTH}): the core calls a deeper body poison.
   */
  static final int ENVELOPE_MAX_DEPTH = 512;

  /** The core's reason for a body nested deeper than {@link #ENVELOPE_MAX_DEPTH}. */
  static final String TOO_DEEP_REASON =
      "body is not JSON: nested too deeply (more than " + ENVELOPE_MAX_DEPTH + " levels)";

  static final int STRING = 1;
  static final int INTEGER = 2;
  static final int FLOAT = 3;
  static final int TRUE = 4;
  static final int FALSE = 5;
  static final int NULL = 6;
  static final int OBJECT = 7;
  static final int ARRAY = 8;

  /** Thrown (one shared instance, no stack trace) when the scanner does not vouch for the body. */
  static final class Unsure extends RuntimeException {
    private static final long serialVersionUID = 1L;

    private Unsure() {
      super("not vouched for", null, false, false);
    }
  }

  static final Unsure UNSURE = new Unsure();

  /**
   * Thrown when the body is certainly poison for the core codec, with the start of the core's
   * reason: the first problem met reading left to right is NaN/Infinity or a number only
   * infinity can hold ("not usable"), or an integer longer than Python's int() reads.
   */
  static final class Poison extends RuntimeException {
    private static final long serialVersionUID = 1L;
    final String reason;

    private Poison(String reason) {
      super(reason, null, false, false);
      this.reason = reason;
    }
  }

  static final Poison NOT_USABLE = new Poison("body is not usable JSON");
  static final Poison NOT_JSON = new Poison("body is not JSON");
  /** Python's default limit on the digits int() reads (sys.get_int_max_str_digits()). */
  static final int PYTHON_INT_DIGITS = 4300;

  /** One scanned value: its kind and its bytes [start, end). */
  static final class Value {
    final int kind;
    final int start;
    final int end;
    final boolean escaped; // a string holding at least one backslash escape

    Value(int kind, int start, int end, boolean escaped) {
      this.kind = kind;
      this.start = start;
      this.end = end;
      this.escaped = escaped;
    }
  }

  /** Receives the members of an object scanned by {@link #object}. */
  interface Members {
    /** The key occupies [keyStart, keyEnd) without its quotes; return true to get the value. */
    boolean wants(int keyStart, int keyEnd, boolean keyEscaped);

    void member(int keyStart, int keyEnd, boolean keyEscaped, Value value);

    /**
     * Takes the wanted member's value, the scanner standing before it (whitespace allowed): by
     * default it is described and handed to {@link #member}. A reader that converts values as
     * it scans consumes it here instead, with the scanner's own methods at {@code depth}, so
     * the value is validated exactly as {@link #value} would and read in the same pass.
     */
    default void read(JsonScanner s, int depth, int keyStart, int keyEnd, boolean keyEscaped) {
      member(keyStart, keyEnd, keyEscaped, s.describe(depth));
    }
  }

  /** Receives the elements of an array scanned by {@link #array(int, Elements)}. */
  interface Elements {
    void element(Value value);

    /** Takes one element where the scanner stands; see {@link Members#read}. */
    default void read(JsonScanner s, int depth) {
      element(s.describe(depth));
    }
  }

  final byte[] b;
  final int end;
  int pos;
  private boolean lastEscaped;
  /** A string held a lone surrogate escape: Python reads it, the core then calls the body poison. */
  boolean loneSurrogate;

  JsonScanner(byte[] body, int start, int end) {
    this.b = body;
    this.pos = start;
    this.end = end;
  }

  void skipWhitespace() {
    while (pos < end) {
      byte c = b[pos];
      if (c == ' ' || c == '\n' || c == '\r' || c == '\t') {
        pos++;
      } else {
        return;
      }
    }
  }

  boolean atEnd() {
    return pos >= end;
  }

  byte peek() {
    if (pos >= end) {
      throw UNSURE;
    }
    return b[pos];
  }

  private void expect(byte c) {
    if (pos >= end || b[pos] != c) {
      throw UNSURE;
    }
    pos++;
  }

  /** Scans one value at the current position (leading whitespace allowed) and returns its kind. */
  int value(int depth) {
    skipWhitespace();
    byte c = peek();
    switch (c) {
      case '{':
        object(depth + 1, null);
        return OBJECT;
      case '[':
        array(depth + 1);
        return ARRAY;
      case '"':
        string();
        return STRING;
      case 't':
        literal("true");
        return TRUE;
      case 'f':
        literal("false");
        return FALSE;
      case 'n':
        literal("null");
        return NULL;
      case 'N':
        literal("NaN");
        throw NOT_USABLE;
      case 'I':
        literal("Infinity");
        throw NOT_USABLE;
      default:
        return number();
    }
  }

  /** Scans one value and describes it. */
  Value describe(int depth) {
    skipWhitespace();
    int start = pos;
    int kind = value(depth);
    return new Value(kind, start, pos, kind == STRING && lastEscaped);
  }

  /** Scans the object at the current position, reporting its members to {@code sink} (may be null). */
  void object(int depth, Members sink) {
    if (depth > MAX_DEPTH) {
      throw UNSURE;
    }
    expect((byte) '{');
    skipWhitespace();
    if (peek() == '}') {
      pos++;
      return;
    }
    while (true) {
      skipWhitespace();
      if (peek() != '"') {
        throw UNSURE;
      }
      int keyStart = pos + 1;
      string();
      int keyEnd = pos - 1;
      boolean keyEscaped = lastEscaped;
      skipWhitespace();
      expect((byte) ':');
      if (sink != null && sink.wants(keyStart, keyEnd, keyEscaped)) {
        sink.read(this, depth, keyStart, keyEnd, keyEscaped);
      } else {
        value(depth);
      }
      skipWhitespace();
      byte c = peek();
      pos++;
      if (c == '}') {
        return;
      }
      if (c != ',') {
        throw UNSURE;
      }
    }
  }

  private void array(int depth) {
    array(depth, null);
  }

  /** Scans the array at the current position, reporting its elements to {@code sink} (may be null). */
  void array(int depth, Elements sink) {
    if (depth > MAX_DEPTH) {
      throw UNSURE;
    }
    expect((byte) '[');
    skipWhitespace();
    if (peek() == ']') {
      pos++;
      return;
    }
    while (true) {
      if (sink != null) {
        sink.read(this, depth);
      } else {
        value(depth);
      }
      skipWhitespace();
      byte c = peek();
      pos++;
      if (c == ']') {
        return;
      }
      if (c != ',') {
        throw UNSURE;
      }
    }
  }

  private void literal(String word) {
    int n = word.length();
    if (end - pos < n) {
      throw UNSURE;
    }
    for (int i = 0; i < n; i++) {
      if (b[pos + i] != word.charAt(i)) {
        throw UNSURE;
      }
    }
    pos += n;
  }

  private static boolean digit(byte c) {
    return c >= '0' && c <= '9';
  }

  private int number() {
    int start = pos;
    if (pos < end && b[pos] == '-') {
      pos++;
      if (pos < end && b[pos] == 'I') {
        literal("Infinity");
        throw NOT_USABLE;
      }
    }
    if (pos >= end) {
      throw UNSURE;
    }
    int intStart = pos;
    if (b[pos] == '0') {
      pos++;
    } else if (b[pos] >= '1' && b[pos] <= '9') {
      while (pos < end && digit(b[pos])) {
        pos++;
      }
    } else {
      throw UNSURE;
    }
    int intDigits = pos - intStart;
    boolean fraction = false;
    boolean exponent = false;
    if (pos < end && b[pos] == '.') {
      pos++;
      int at = pos;
      while (pos < end && digit(b[pos])) {
        pos++;
      }
      if (pos == at) {
        throw UNSURE;
      }
      fraction = true;
    }
    if (pos < end && (b[pos] == 'e' || b[pos] == 'E')) {
      pos++;
      if (pos < end && (b[pos] == '+' || b[pos] == '-')) {
        pos++;
      }
      int at = pos;
      while (pos < end && digit(b[pos])) {
        pos++;
      }
      if (pos == at) {
        throw UNSURE;
      }
      exponent = true;
    }
    if (!fraction && !exponent) {
      if (intDigits > PYTHON_INT_DIGITS) {
        throw NOT_JSON;
      }
      // an integer only infinity could hold is poison to the core, as 1e400 is
      if (intDigits > 308 && Double.isInfinite(
          Double.parseDouble(new String(b, start, pos - start, StandardCharsets.ISO_8859_1)))) {
        throw NOT_USABLE;
      }
      return INTEGER;
    }
    // Only an exponent or more than 308 integer digits can reach infinity, which the core refuses.
    if (exponent || intDigits > 308) {
      String text = new String(b, start, pos - start, StandardCharsets.ISO_8859_1);
      if (Double.isInfinite(Double.parseDouble(text))) {
        throw NOT_USABLE;
      }
    }
    return FLOAT;
  }

  private static int hex(byte c) {
    if (c >= '0' && c <= '9') {
      return c - '0';
    }
    if (c >= 'a' && c <= 'f') {
      return c - 'a' + 10;
    }
    if (c >= 'A' && c <= 'F') {
      return c - 'A' + 10;
    }
    throw UNSURE;
  }

  private int hex4(int at) {
    if (at + 4 > end) {
      throw UNSURE;
    }
    return (hex(b[at]) << 12) | (hex(b[at + 1]) << 8) | (hex(b[at + 2]) << 4) | hex(b[at + 3]);
  }

  private static boolean continuation(byte c) {
    return (c & 0xC0) == 0x80;
  }

  /** Scans a string at the current position ('"'); leaves {@link #lastEscaped} set. */
  private void string() {
    pos++; // the opening quote
    boolean escaped = false;
    while (true) {
      if (pos >= end) {
        throw UNSURE;
      }
      int c = b[pos] & 0xFF;
      if (c == '"') {
        pos++;
        lastEscaped = escaped;
        return;
      }
      if (c == '\\') {
        escaped = true;
        pos = escape(pos + 1);
      } else if (c < 0x20) {
        throw UNSURE;
      } else if (c < 0x80) {
        pos++;
      } else {
        pos = utf8(pos, c);
      }
    }
  }

  /** Validates the escape after a backslash at {@code at}; returns the position after it. */
  private int escape(int at) {
    if (at >= end) {
      throw UNSURE;
    }
    switch (b[at]) {
      case '"':
      case '\\':
      case '/':
      case 'b':
      case 'f':
      case 'n':
      case 'r':
      case 't':
        return at + 1;
      case 'u':
        int unit = hex4(at + 1);
        if (unit >= 0xDC00 && unit <= 0xDFFF) {
          loneSurrogate = true; // a low surrogate without its high half
        } else if (unit >= 0xD800 && unit <= 0xDBFF) {
          int next = at + 5;
          if (next + 6 <= end && b[next] == '\\' && b[next + 1] == 'u') {
            int low = hex4(next + 2);
            if (low >= 0xDC00 && low <= 0xDFFF) {
              return next + 6;
            }
          }
          loneSurrogate = true; // the next escape is read on its own
        }
        return at + 5;
      default:
        throw UNSURE;
    }
  }

  /** Validates one multi-byte UTF-8 sequence starting with lead byte {@code c} at {@code at}. */
  private int utf8(int at, int c) {
    int need;
    int lo = 0x80;
    int hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) {
      need = 1;
    } else if (c >= 0xE0 && c <= 0xEF) {
      need = 2;
      if (c == 0xE0) {
        lo = 0xA0;
      } else if (c == 0xED) {
        hi = 0x9F; // no encoded surrogates
      }
    } else if (c >= 0xF0 && c <= 0xF4) {
      need = 3;
      if (c == 0xF0) {
        lo = 0x90;
      } else if (c == 0xF4) {
        hi = 0x8F;
      }
    } else {
      throw UNSURE;
    }
    if (at + need >= end) {
      throw UNSURE;
    }
    int second = b[at + 1] & 0xFF;
    if (second < lo || second > hi) {
      throw UNSURE;
    }
    for (int i = 2; i <= need; i++) {
      if (!continuation(b[at + i])) {
        throw UNSURE;
      }
    }
    return at + need + 1;
  }

  // -- reading scanned values ----------------------------------------------------------------------

  /** The text of a scanned string value, escapes decoded. */
  static String text(byte[] b, Value v) {
    return v.escaped
        ? unescape(b, v.start + 1, v.end - 1)
        : new String(b, v.start + 1, v.end - v.start - 2, StandardCharsets.UTF_8);
  }

  /** Decodes the (already validated) string content in [start, end). */
  static String unescape(byte[] b, int start, int end) {
    StringBuilder out = new StringBuilder(end - start);
    int run = start;
    int i = start;
    while (i < end) {
      if (b[i] != '\\') {
        i++;
        continue;
      }
      if (i > run) {
        out.append(new String(b, run, i - run, StandardCharsets.UTF_8));
      }
      byte e = b[i + 1];
      switch (e) {
        case 'b':
          out.append('\b');
          break;
        case 'f':
          out.append('\f');
          break;
        case 'n':
          out.append('\n');
          break;
        case 'r':
          out.append('\r');
          break;
        case 't':
          out.append('\t');
          break;
        case 'u':
          out.append((char) ((hexOf(b[i + 2]) << 12) | (hexOf(b[i + 3]) << 8)
              | (hexOf(b[i + 4]) << 4) | hexOf(b[i + 5])));
          i += 4;
          break;
        default: // '"', '\\', '/'
          out.append((char) e);
      }
      i += 2;
      run = i;
    }
    if (end > run) {
      out.append(new String(b, run, end - run, StandardCharsets.UTF_8));
    }
    return out.toString();
  }

  private static int hexOf(byte c) {
    return c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10;
  }

  /** Whether the key in [start, end) (validated, maybe escaped) equals the ASCII {@code name}. */
  static boolean keyIs(byte[] b, int start, int end, boolean escaped, String name) {
    if (escaped) {
      return unescape(b, start, end).equals(name);
    }
    int n = name.length();
    if (end - start != n) {
      return false;
    }
    for (int i = 0; i < n; i++) {
      if (b[start + i] != name.charAt(i)) {
        return false;
      }
    }
    return true;
  }

  /**
   * The deepest level of objects and arrays in {@code b}, counted outside strings exactly as the
   * core codec counts it ({@code babelq.envelope.limits.nesting_depth}), for any bytes: a
   * {@code "} starts a string running to the next unescaped {@code "} or to the end.
   */
  static int nestingDepth(byte[] b) {
    int depth = 0;
    int deepest = 0;
    boolean inString = false;
    for (int i = 0; i < b.length; i++) {
      byte c = b[i];
      if (inString) {
        if (c == '\\') {
          i++;
        } else if (c == '"') {
          inString = false;
        }
      } else if (c == '"') {
        inString = true;
      } else if (c == '[' || c == '{') {
        depth++;
        if (depth > deepest) {
          deepest = depth;
        }
      } else if (c == ']' || c == '}') {
        depth--;
      }
    }
    return deepest;
  }

  /** Whether {@code b} nests deeper than {@link #ENVELOPE_MAX_DEPTH}. */
  static boolean tooDeep(byte[] b) {
    int openers = 0;
    for (byte c : b) {
      if (c == '[' || c == '{') {
        openers++;
      }
    }
    return openers > ENVELOPE_MAX_DEPTH && nestingDepth(b) > ENVELOPE_MAX_DEPTH;
  }

  /** The value of an integer token as a long, or null when it does not fit in 64 bits. */
  static Long longValue(byte[] b, Value v) {
    int len = v.end - v.start;
    if (len > 20) {
      return null;
    }
    try {
      return Long.valueOf(Long.parseLong(new String(b, v.start, len, StandardCharsets.ISO_8859_1)));
    } catch (NumberFormatException e) {
      return null;
    }
  }
}
