package babelq.spark;

import java.util.Arrays;
import java.util.function.Function;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.api.java.UDF1;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * The fast path of {@code babelq.spark.decode}: one pass over an envelope body.
 *
 * <p>Returns null unless the body is one strict JSON object as the core codec reads it
 * ({@link JsonScanner}); the exact SQL path decides those rows (poison, or a legal oddity the
 * scanner does not vouch for). For a JSON object it returns {@code accepted} = whether the
 * consumer rules accept it (a URN in {@code job}, or in {@code urn} when {@code job} is absent,
 * {@code meta} an object with {@code schema_version} exactly 1, {@code data} an object, {@code attempts} an integer,
 * {@code trace_id} a non-blank string) and {@code data}, the body's own text of the data
 * object as UTF-8 bytes (null when data is not an object). Only for an accepted envelope are the other
 * fields filled; a rejected one gets its reason and fields from the exact path. A repeated key
 * keeps its last value.
 *
 * <p>A body the core certainly calls poison where Spark's parser would not (NaN, Infinity, a
 * number beyond a double, an overlong integer, a lone surrogate escape) gets a row with only
 * {@code poison} set: the start of the core's reason. The core measures nesting before it
 * parses, so such a body nested deeper than {@link JsonScanner#ENVELOPE_MAX_DEPTH} gets the
 * core's "nested too deeply" reason instead ({@link JsonScanner#nestingDepth}).
 *
 * <p>Integer members the standard types as int64 ({@code attempts}, {@code meta.created_at},
 * {@code dead_letter.failed_at} and {@code dead_letter.attempts}, the last three also null) must
 * fit one, and {@code dead_letter} must be an object or null; a body breaking that is not
 * accepted here and the exact path gives the reason.
 *
 * <p>The row's fields, in order (the Python side declares the same type): accepted, urn,
 * trace_id, id, queue, lang, schema_version, created_at, attempts, correlation_id,
 * sharding_key, deliver_at, expire_at, priority, transaction_id, data, dead_letter (a struct of
 * the dead-letter block's fields, or null), poison.
 */
public final class EnvelopeScan implements UDF1<byte[], Row> {
  private static final long serialVersionUID = 1L;

  private static final String[] TOP = {"job", "urn", "trace_id", "data", "meta", "attempts", "dead_letter"};
  private static final int JOB = 0;
  private static final int URN = 1;
  private static final int TRACE_ID = 2;
  private static final int DATA = 3;
  private static final int META = 4;
  private static final int ATTEMPTS = 5;
  private static final int DEAD_LETTER = 6;

  private static final String[] META_KEYS = {
    "id", "queue", "lang", "schema_version", "created_at", "correlation_id", "sharding_key",
    "deliver_at", "expire_at", "priority", "transaction_id"
  };

  /** The dead-letter struct's fields and whether each is a long (else a string). */
  private static final String[] DEAD_LETTER_KEYS = {
    "reason", "error", "exception", "failed_at", "original_queue", "attempts", "lang", "cause"
  };

  private static final boolean[] DEAD_LETTER_LONG = {false, false, false, true, false, true, false, false};

  @Override
  public Row call(byte[] body) {
    return scan(body, null);
  }

  /** Collects the last value of each of a fixed set of keys. */
  private static class Keys implements JsonScanner.Members {
    private final byte[] b;
    private final String[] names;
    final JsonScanner.Value[] values;

    Keys(byte[] b, String[] names) {
      this.b = b;
      this.names = names;
      this.values = new JsonScanner.Value[names.length];
    }

    private int index(int start, int end, boolean escaped) {
      for (int i = 0; i < names.length; i++) {
        if (JsonScanner.keyIs(b, start, end, escaped, names[i])) {
          return i;
        }
      }
      return -1;
    }

    @Override
    public boolean wants(int start, int end, boolean escaped) {
      return index(start, end, escaped) >= 0;
    }

    @Override
    public void member(int start, int end, boolean escaped, JsonScanner.Value value) {
      values[index(start, end, escaped)] = value;
    }
  }

  /**
   * The top-level keys, with an object under {@code data} read into its struct by {@code typed}
   * as it is scanned (one pass; the last {@code data} key wins, as for the other keys).
   */
  private static final class TopKeys extends Keys {
    private final DataReader typed;
    Object data;

    TopKeys(byte[] b, DataReader typed) {
      super(b, TOP);
      this.typed = typed;
    }

    @Override
    public void read(JsonScanner s, int depth, int start, int end, boolean escaped) {
      if (typed == null || !JsonScanner.keyIs(s.b, start, end, escaped, TOP[DATA])) {
        super.read(s, depth, start, end, escaped);
        return;
      }
      s.skipWhitespace();
      int at = s.pos;
      if (s.peek() == '{') {
        data = typed.read(s, depth);
        values[DATA] = new JsonScanner.Value(JsonScanner.OBJECT, at, s.pos, false);
      } else {
        data = null;
        values[DATA] = s.describe(depth);
      }
    }
  }

  private static Keys members(byte[] b, JsonScanner.Value object, String[] names) {
    Keys keys = new Keys(b, names);
    new JsonScanner(b, object.start, object.end).object(1, keys);
    return keys;
  }

  private static final int FIELDS = 18;

  /** The scan of {@code b}; {@code typed} reads data into a struct, null keeps data as text. */
  static Row scan(byte[] b, DataReader typed) {
    return guarded(b, typed, EnvelopeScan::external);
  }

  /**
   * The same scan as Spark's internal row ({@code UTF8String}, {@code GenericInternalRow}), for
   * the catalog function {@link EnvelopeScanFunction}: Spark uses it without converting it.
   * {@code typed}, when given, must build internal values too.
   */
  static InternalRow scanInternal(byte[] b, DataReader typed) {
    return guarded(b, typed, EnvelopeScan::internal);
  }

  /**
   * The scan of {@code b} in the row form {@code form} builds, or null for a null body and
   * whenever the scan is unsure. Every entry point (the Java UDFs and the catalog function) scans
   * through here, so one odd body never fails the job: the exact path decides it.
   */
  private static <T> T guarded(byte[] b, DataReader typed, Function<Object[], T> form) {
    if (b == null) {
      return null;
    }
    try {
      Object[] row = fields(b, typed);
      return row == null ? null : form.apply(row);
    } catch (JsonScanner.Unsure unsure) {
      return null;
    } catch (RuntimeException bug) {
      return null;
    }
  }

  /** The row's fields (a nested struct as Object[], strings as String), or null when unsure. */
  private static Object[] fields(byte[] b, DataReader typed) {
    JsonScanner s = new JsonScanner(b, 0, b.length);
    try {
      return scan(b, s, typed);
    } catch (JsonScanner.Poison poison) {
      return poison(b, poison.reason);
    }
  }

  /** The Java UDF's row: nested Object[] (the dead-letter block) become Rows. */
  private static Row external(Object[] row) {
    for (int i = 0; i < row.length; i++) {
      if (row[i] instanceof Object[]) {
        row[i] = external((Object[]) row[i]);
      }
    }
    return RowFactory.create(row);
  }

  /** Spark's internal row: Strings become UTF8String, nested Object[] internal rows. */
  private static InternalRow internal(Object[] row) {
    for (int i = 0; i < row.length; i++) {
      Object v = row[i];
      if (v instanceof String) {
        row[i] = UTF8String.fromString((String) v);
      } else if (v instanceof Object[]) {
        row[i] = internal((Object[]) v);
      }
    }
    return new GenericInternalRow(row);
  }

  /**
   * The poison row for {@code b}: the core checks the nesting depth before anything the parser
   * finds, so a body nested too deeply gets that reason whatever else is wrong with it.
   */
  private static Object[] poison(byte[] b, String reason) {
    return poison(JsonScanner.tooDeep(b) ? JsonScanner.TOO_DEEP_REASON : reason);
  }

  private static Object[] poison(String reason) {
    Object[] row = new Object[FIELDS];
    row[0] = Boolean.FALSE;
    row[17] = reason;
    return row;
  }

  private static Object[] scan(byte[] b, JsonScanner s, DataReader typed) {
    s.skipWhitespace();
    if (s.peek() != '{') { // not an object: the exact path says what it is, unless it is poison
      s.value(0);
      s.skipWhitespace();
      return s.atEnd() && s.loneSurrogate ? poison(b, JsonScanner.NOT_JSON.reason) : null;
    }
    TopKeys top = new TopKeys(b, typed);
    s.object(1, top);
    s.skipWhitespace();
    if (!s.atEnd()) {
      return null;
    }
    if (s.loneSurrogate) {
      return poison(b, JsonScanner.NOT_JSON.reason);
    }
    JsonScanner.Value[] v = top.values;
    JsonScanner.Value data = v[DATA];
    Object dataValue = null;
    if (data != null && data.kind == JsonScanner.OBJECT) {
      // the text as bytes: Spark keeps strings as UTF-8, so a Java String would be decoded
      // here and encoded again on the way out (the SQL side casts binary to string for free)
      dataValue = typed != null ? top.data : Arrays.copyOfRange(b, data.start, data.end);
    }
    Object[] row = accepted(b, v);
    if (row == null) { // one JSON object, not accepted: the exact path gives the reason and fields
      row = new Object[FIELDS];
      row[0] = Boolean.FALSE;
    }
    row[15] = dataValue;
    return row;
  }

  /** The fields of an accepted envelope (data left for the caller), or null when not accepted. */
  private static Object[] accepted(byte[] b, JsonScanner.Value[] v) {
    // job when present; the urn alias only when job is missing or null
    JsonScanner.Value job = v[JOB];
    boolean jobAbsent = job == null || job.kind == JsonScanner.NULL;
    String urn = nonBlank(string(b, jobAbsent ? v[URN] : job));
    if (urn == null) {
      return null;
    }
    JsonScanner.Value metaValue = v[META];
    if (metaValue == null || metaValue.kind != JsonScanner.OBJECT) {
      return null;
    }
    JsonScanner.Value[] meta = members(b, metaValue, META_KEYS).values;
    JsonScanner.Value version = meta[3];
    if (version == null || version.kind != JsonScanner.INTEGER || version.end - version.start != 1
        || b[version.start] != '1') {
      return null;
    }
    JsonScanner.Value data = v[DATA];
    if (data == null || data.kind != JsonScanner.OBJECT) {
      return null;
    }
    JsonScanner.Value attemptsValue = v[ATTEMPTS];
    if (attemptsValue == null || attemptsValue.kind != JsonScanner.INTEGER) {
      return null;
    }
    Long attempts = JsonScanner.longValue(b, attemptsValue);
    if (attempts == null) { // beyond signed 64 bits: rejected
      return null;
    }
    String traceId = string(b, v[TRACE_ID]);
    if (nonBlank(traceId) == null) {
      return null;
    }
    if (!int64OrNull(b, meta[4])) { // meta.created_at
      return null;
    }
    JsonScanner.Value block = v[DEAD_LETTER];
    if (block != null && block.kind != JsonScanner.OBJECT && block.kind != JsonScanner.NULL) {
      return null;
    }
    Object[] deadLetter;
    try {
      deadLetter = deadLetter(b, block);
    } catch (JsonScanner.Unsure oddBlock) { // a field of another type: the exact path decides
      return null;
    }
    Long priority = integer(b, meta[9]);
    long level = priority == null ? 5L : priority.longValue();
    return new Object[] {
      Boolean.TRUE,
      urn,
      traceId,
      orEmpty(string(b, meta[0])),
      orEmpty(string(b, meta[1])),
      orEmpty(string(b, meta[2])),
      Long.valueOf(1L),
      integer(b, meta[4]),
      attempts,
      string(b, meta[5]),
      string(b, meta[6]),
      integer(b, meta[7]),
      integer(b, meta[8]),
      Long.valueOf(level >= 1 && level <= 10 ? level : 5L),
      string(b, meta[10]),
      null, // data, set by the caller
      deadLetter,
      null // poison
    };
  }

  /** The dead-letter struct, null when absent or not an object; unsure when a field has an odd type. */
  private static Object[] deadLetter(byte[] b, JsonScanner.Value block) {
    if (block == null || block.kind != JsonScanner.OBJECT) {
      return null;
    }
    JsonScanner.Value[] fields = members(b, block, DEAD_LETTER_KEYS).values;
    Object[] out = new Object[fields.length];
    for (int i = 0; i < fields.length; i++) {
      JsonScanner.Value f = fields[i];
      if (f == null || f.kind == JsonScanner.NULL) {
        continue;
      }
      if (DEAD_LETTER_LONG[i]) {
        Long value = f.kind == JsonScanner.INTEGER ? JsonScanner.longValue(b, f) : null;
        if (value == null) {
          throw JsonScanner.UNSURE;
        }
        out[i] = value;
      } else {
        if (f.kind != JsonScanner.STRING) {
          throw JsonScanner.UNSURE;
        }
        out[i] = JsonScanner.text(b, f);
      }
    }
    return out;
  }

  private static String string(byte[] b, JsonScanner.Value v) {
    return v != null && v.kind == JsonScanner.STRING ? JsonScanner.text(b, v) : null;
  }

  private static Long integer(byte[] b, JsonScanner.Value v) {
    return v != null && v.kind == JsonScanner.INTEGER ? JsonScanner.longValue(b, v) : null;
  }

  /** Absent, null, or an integer that fits signed 64 bits. */
  private static boolean int64OrNull(byte[] b, JsonScanner.Value v) {
    if (v == null || v.kind == JsonScanner.NULL) {
      return true;
    }
    return v.kind == JsonScanner.INTEGER && JsonScanner.longValue(b, v) != null;
  }

  private static String orEmpty(String s) {
    return s == null ? "" : s;
  }

  /** {@code s} when it holds a character outside Python's {@code " \t\n\r\x0b\x0c"}, else null. */
  private static String nonBlank(String s) {
    if (s == null) {
      return null;
    }
    for (int i = 0; i < s.length(); i++) {
      char c = s.charAt(i);
      if (c != ' ' && c != '\t' && c != '\n' && c != '\r' && c != 0x0B && c != 0x0C) {
        return s;
      }
    }
    return null;
  }
}
