package babelq.spark;

import java.util.Arrays;
import java.util.BitSet;
import java.util.regex.Pattern;
import org.apache.spark.SparkRuntimeException;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.SpecializedGetters;
import org.apache.spark.sql.catalyst.util.ArrayData;
import org.apache.spark.sql.catalyst.util.MapData;
import org.apache.spark.sql.connector.catalog.functions.BoundFunction;
import org.apache.spark.sql.connector.catalog.functions.ScalarFunction;
import org.apache.spark.sql.connector.catalog.functions.UnboundFunction;
import org.apache.spark.sql.types.ArrayType;
import org.apache.spark.sql.types.BooleanType;
import org.apache.spark.sql.types.ByteType;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.DoubleType;
import org.apache.spark.sql.types.FloatType;
import org.apache.spark.sql.types.IntegerType;
import org.apache.spark.sql.types.LongType;
import org.apache.spark.sql.types.MapType;
import org.apache.spark.sql.types.NullType;
import org.apache.spark.sql.types.ShortType;
import org.apache.spark.sql.types.StringType;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.unsafe.Platform;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * The canonical JSON text of an envelope's {@code data} struct, written in one pass over Spark's
 * internal row (SPEC section 2.3: what Python's {@code json.dumps(value, ensure_ascii=False,
 * separators=(",", ":"))} writes for the value PySpark would hand back for the row).
 *
 * <p>{@code babelq.spark.encode} builds the same text from Spark SQL string functions when this
 * jar is not loaded; those take dozens of expressions per field (escaping alone is a chain of
 * {@code replace} calls per string) where this walks each value once and copies string bytes as
 * they are. It is a DataSource V2 {@link ScalarFunction} (served by {@link Functions}) with a
 * magic {@code invoke(InternalRow)} method, so Spark calls it from generated code on the internal
 * row, with no conversion to a {@code Row} as a Java UDF would need.
 *
 * <p>The rules, as the SQL path's: strings escape {@code "}, {@code \} and control characters
 * ({@code \b \t \n \f \r}, else {@code \}{@code u00xx} lower-case); other bytes, UTF-8 included,
 * are copied. Integers and booleans as Java writes them; doubles (floats widened first, as
 * PySpark does) as Python's {@code repr} ({@link PythonFloat}); a NaN or an infinity fails the
 * task with the same message the SQL path raises ({@code <path>: NaN and Infinity are not allowed
 * in JSON}); SQL null as {@code null}; structs in field order; maps (string keys) in entry order.
 * A null {@code data} struct is {@code {}}, as the producer writes a missing payload. Top-level
 * fields whose index is in the function's omit set are left out when null.
 */
public final class DataJson implements UnboundFunction {
  private static final long serialVersionUID = 1L;

  /** The function name without the omit set; {@link Functions} serves it. */
  public static final String NAME = "data_json_v1";

  private final BitSet omit;

  DataJson(BitSet omit) {
    this.omit = omit;
  }

  @Override
  public String name() {
    return NAME;
  }

  @Override
  public String description() {
    return "data_json_v1(struct): canonical JSON of a BabelQueue data struct (babelq)";
  }

  @Override
  public BoundFunction bind(StructType inputType) {
    if (inputType.fields().length != 1 || !(inputType.fields()[0].dataType() instanceof StructType)) {
      throw new UnsupportedOperationException(NAME + " takes one struct argument");
    }
    StructType schema = (StructType) inputType.fields()[0].dataType();
    return new Bound(schema, new StructWriter(schema, "data", omit));
  }

  /** The bound function: one writer tree compiled from the data struct's type. */
  public static final class Bound implements ScalarFunction<UTF8String> {
    private static final long serialVersionUID = 1L;
    private static final byte[] EMPTY = {'{', '}'};
    private static final ThreadLocal<Out> SCRATCH = ThreadLocal.withInitial(Out::new);

    private final StructType schema;
    private final StructWriter root;

    Bound(StructType schema, StructWriter root) {
      this.schema = schema;
      this.root = root;
    }

    @Override
    public DataType[] inputTypes() {
      return new DataType[] {schema};
    }

    @Override
    public DataType resultType() {
      return DataTypes.StringType;
    }

    @Override
    public boolean isResultNullable() {
      return false;
    }

    @Override
    public String name() {
      return NAME;
    }

    @Override
    public String canonicalName() {
      return "babelq." + NAME + root.signature();
    }

    /** Spark's magic method, called from generated code with the struct's internal row. */
    public UTF8String invoke(InternalRow data) {
      if (data == null) {
        return UTF8String.fromBytes(EMPTY.clone());
      }
      Out out = SCRATCH.get();
      out.len = 0;
      root.object(out, data);
      return UTF8String.fromBytes(out.take());
    }

    @Override
    public UTF8String produceResult(InternalRow input) {
      return invoke(input.isNullAt(0) ? null : input.getStruct(0, schema.size()));
    }
  }

  /** A growing byte buffer, one per thread, reused row after row. */
  static final class Out {
    byte[] buf = new byte[512];
    int len;

    /** The bytes written, copied out; a buffer grown past 1 MiB by a huge row is let go. */
    byte[] take() {
      byte[] text = Arrays.copyOf(buf, len);
      if (buf.length > (1 << 20)) {
        buf = new byte[512];
      }
      len = 0;
      return text;
    }

    void room(int more) {
      if (len + more > buf.length) {
        buf = Arrays.copyOf(buf, Math.max(buf.length * 2, len + more));
      }
    }

    void put(byte b) {
      room(1);
      buf[len++] = b;
    }

    void put(byte[] bytes) {
      room(bytes.length);
      System.arraycopy(bytes, 0, buf, len, bytes.length);
      len += bytes.length;
    }

    void ascii(String text) {
      int n = text.length();
      room(n);
      for (int i = 0; i < n; i++) {
        buf[len++] = (byte) text.charAt(i);
      }
    }

    void number(long v) {
      if (v == Long.MIN_VALUE) {
        ascii("-9223372036854775808");
        return;
      }
      room(20);
      if (v < 0) {
        buf[len++] = '-';
        v = -v;
      }
      int digits = 1;
      for (long rest = v / 10; rest != 0; rest /= 10) {
        digits++;
      }
      int at = len + digits;
      len = at;
      do {
        buf[--at] = (byte) ('0' + (v % 10));
        v /= 10;
      } while (v != 0);
    }

    private static final byte[] HEX = "0123456789abcdef".getBytes(java.nio.charset.StandardCharsets.US_ASCII);

    /** Whether {@code s} holds no byte a JSON string token must escape. */
    static boolean plain(UTF8String s) {
      Object base = s.getBaseObject();
      long offset = s.getBaseOffset();
      int n = s.numBytes();
      for (int i = 0; i < n; i++) {
        byte b = Platform.getByte(base, offset + i);
        if (b >= 0 && (b < 0x20 || b == '"' || b == '\\')) {
          return false;
        }
      }
      return true;
    }

    /** The JSON string token of {@code s}: its UTF-8 bytes copied, then escaped where needed. */
    void string(UTF8String s) {
      int n = s.numBytes();
      room(n + 2);
      buf[len++] = '"';
      int start = len;
      s.writeToMemory(buf, Platform.BYTE_ARRAY_OFFSET + start);
      int i = 0;
      while (i < n) {
        byte b = buf[start + i];
        if (b >= 0 && (b < 0x20 || b == '"' || b == '\\')) {
          break;
        }
        i++;
      }
      if (i == n) {
        len = start + n;
        buf[len++] = '"';
        return;
      }
      // escape from the first byte that needs it, reading the source again
      len = start + i;
      Object base = s.getBaseObject();
      long offset = s.getBaseOffset();
      for (; i < n; i++) {
        byte b = Platform.getByte(base, offset + i);
        if (b >= 0 && (b < 0x20 || b == '"' || b == '\\')) {
          room(6 + (n - i));
          buf[len++] = '\\';
          switch (b) {
            case '"': buf[len++] = '"'; break;
            case '\\': buf[len++] = '\\'; break;
            case 0x08: buf[len++] = 'b'; break;
            case 0x09: buf[len++] = 't'; break;
            case 0x0a: buf[len++] = 'n'; break;
            case 0x0c: buf[len++] = 'f'; break;
            case 0x0d: buf[len++] = 'r'; break;
            default:
              buf[len++] = 'u';
              buf[len++] = '0';
              buf[len++] = '0';
              buf[len++] = HEX[b >> 4];
              buf[len++] = HEX[b & 0xf];
          }
        } else {
          room(1 + (n - i));
          buf[len++] = b;
        }
      }
      put((byte) '"');
    }
  }

  /** Writes the non-null value at {@code ordinal} of {@code from}. */
  abstract static class Writer implements java.io.Serializable {
    private static final long serialVersionUID = 1L;

    abstract void write(Out out, SpecializedGetters from, int ordinal);

    /** A short text naming the written shape (part of the bound function's canonical name). */
    abstract String signature();
  }

  private static final byte[] NULL = {'n', 'u', 'l', 'l'};
  private static final byte[] TRUE = {'t', 'r', 'u', 'e'};
  private static final byte[] FALSE = {'f', 'a', 'l', 's', 'e'};
  private static final Pattern PLAIN_KEY = Pattern.compile("[A-Za-z_][A-Za-z0-9_\\-]*");

  /** {@code babelq.envelope.payload.format_path(root, [key])}: the path error messages name. */
  static String fieldPath(String root, String key) {
    if (PLAIN_KEY.matcher(key).matches()) {
      return root + "." + key;
    }
    return root + "[\"" + key.replace("\\", "\\\\").replace("\"", "\\\"") + "\"]";
  }

  static void value(Out out, SpecializedGetters from, int ordinal, Writer writer) {
    if (from.isNullAt(ordinal)) {
      out.put(NULL);
    } else {
      writer.write(out, from, ordinal);
    }
  }

  static Writer compile(DataType type, String path) {
    if (type instanceof StringType) {
      return new Leaf("s") {
        private static final long serialVersionUID = 1L;

        @Override
        void write(Out out, SpecializedGetters from, int ordinal) {
          out.string(from.getUTF8String(ordinal));
        }
      };
    }
    if (type instanceof LongType) {
      return new Leaf("l") {
        private static final long serialVersionUID = 1L;

        @Override
        void write(Out out, SpecializedGetters from, int ordinal) {
          out.number(from.getLong(ordinal));
        }
      };
    }
    if (type instanceof IntegerType) {
      return new Leaf("i") {
        private static final long serialVersionUID = 1L;

        @Override
        void write(Out out, SpecializedGetters from, int ordinal) {
          out.number(from.getInt(ordinal));
        }
      };
    }
    if (type instanceof ShortType) {
      return new Leaf("h") {
        private static final long serialVersionUID = 1L;

        @Override
        void write(Out out, SpecializedGetters from, int ordinal) {
          out.number(from.getShort(ordinal));
        }
      };
    }
    if (type instanceof ByteType) {
      return new Leaf("b") {
        private static final long serialVersionUID = 1L;

        @Override
        void write(Out out, SpecializedGetters from, int ordinal) {
          out.number(from.getByte(ordinal));
        }
      };
    }
    if (type instanceof BooleanType) {
      return new Leaf("z") {
        private static final long serialVersionUID = 1L;

        @Override
        void write(Out out, SpecializedGetters from, int ordinal) {
          out.put(from.getBoolean(ordinal) ? TRUE : FALSE);
        }
      };
    }
    if (type instanceof DoubleType) {
      return new DoubleWriter(path, false);
    }
    if (type instanceof FloatType) {
      return new DoubleWriter(path, true);
    }
    if (type instanceof NullType) {
      return new Leaf("n") {
        private static final long serialVersionUID = 1L;

        @Override
        void write(Out out, SpecializedGetters from, int ordinal) {
          out.put(NULL);
        }
      };
    }
    if (type instanceof StructType) {
      return new StructWriter((StructType) type, path, new BitSet());
    }
    if (type instanceof ArrayType) {
      return new ArrayWriter(compile(((ArrayType) type).elementType(), path + "[]"));
    }
    if (type instanceof MapType && ((MapType) type).keyType() instanceof StringType) {
      return new MapWriter(compile(((MapType) type).valueType(), path + "{}"));
    }
    // the Python side refuses these types before it calls the function
    throw new UnsupportedOperationException(path + ": Spark type " + type.simpleString()
        + " has no canonical JSON form");
  }

  private abstract static class Leaf extends Writer {
    private static final long serialVersionUID = 1L;
    private final String tag;

    Leaf(String tag) {
      this.tag = tag;
    }

    @Override
    String signature() {
      return tag;
    }
  }

  private static final class DoubleWriter extends Writer {
    private static final long serialVersionUID = 1L;
    private final String path;
    private final boolean single;

    DoubleWriter(String path, boolean single) {
      this.path = path;
      this.single = single;
    }

    @Override
    void write(Out out, SpecializedGetters from, int ordinal) {
      double x = single ? (double) from.getFloat(ordinal) : from.getDouble(ordinal);
      String repr = PythonFloat.repr(x);
      if (repr == null) {
        throw refused(path + ": NaN and Infinity are not allowed in JSON");
      }
      out.ascii(repr);
    }

    @Override
    String signature() {
      return single ? "f" : "d";
    }
  }

  /** The error Spark's {@code raise_error} throws, so a refused value fails the job alike. */
  static RuntimeException refused(String message) {
    return new SparkRuntimeException(
        "USER_RAISED_EXCEPTION",
        new scala.collection.immutable.Map.Map1<String, String>("errorMessage", message),
        null,
        new org.apache.spark.QueryContext[0],
        "");
  }

  static final class StructWriter extends Writer {
    private static final long serialVersionUID = 1L;
    private final byte[][] keys;
    private final Writer[] fields;
    private final BitSet omit;
    private final int numFields;

    StructWriter(StructType schema, String path, BitSet omit) {
      StructField[] all = schema.fields();
      this.numFields = all.length;
      this.keys = new byte[all.length][];
      this.fields = new Writer[all.length];
      this.omit = omit;
      for (int i = 0; i < all.length; i++) {
        Out key = new Out();
        key.string(UTF8String.fromString(all[i].name()));
        key.put((byte) ':');
        keys[i] = Arrays.copyOf(key.buf, key.len);
        fields[i] = compile(all[i].dataType(), fieldPath(path, all[i].name()));
      }
    }

    void object(Out out, InternalRow row) {
      out.put((byte) '{');
      boolean first = true;
      for (int i = 0; i < numFields; i++) {
        boolean isNull = row.isNullAt(i);
        if (isNull && omit.get(i)) {
          continue;
        }
        if (!first) {
          out.put((byte) ',');
        }
        first = false;
        out.put(keys[i]);
        if (isNull) {
          out.put(NULL);
        } else {
          fields[i].write(out, row, i);
        }
      }
      out.put((byte) '}');
    }

    @Override
    void write(Out out, SpecializedGetters from, int ordinal) {
      object(out, from.getStruct(ordinal, numFields));
    }

    @Override
    String signature() {
      StringBuilder text = new StringBuilder("{");
      for (int i = 0; i < numFields; i++) {
        text.append(omit.get(i) ? "?" : "").append(i).append(':').append(fields[i].signature()).append(',');
      }
      return text.append('}').toString();
    }
  }

  private static final class ArrayWriter extends Writer {
    private static final long serialVersionUID = 1L;
    private final Writer element;

    ArrayWriter(Writer element) {
      this.element = element;
    }

    @Override
    void write(Out out, SpecializedGetters from, int ordinal) {
      ArrayData items = from.getArray(ordinal);
      out.put((byte) '[');
      int n = items.numElements();
      for (int i = 0; i < n; i++) {
        if (i > 0) {
          out.put((byte) ',');
        }
        value(out, items, i, element);
      }
      out.put((byte) ']');
    }

    @Override
    String signature() {
      return "[" + element.signature() + "]";
    }
  }

  private static final class MapWriter extends Writer {
    private static final long serialVersionUID = 1L;
    private final Writer value;

    MapWriter(Writer value) {
      this.value = value;
    }

    @Override
    void write(Out out, SpecializedGetters from, int ordinal) {
      MapData map = from.getMap(ordinal);
      ArrayData keys = map.keyArray();
      ArrayData values = map.valueArray();
      out.put((byte) '{');
      int n = map.numElements();
      for (int i = 0; i < n; i++) {
        if (i > 0) {
          out.put((byte) ',');
        }
        out.string(keys.getUTF8String(i));
        out.put((byte) ':');
        value(out, values, i, value);
      }
      out.put((byte) '}');
    }

    @Override
    String signature() {
      return "{" + value.signature() + "}";
    }
  }
}
