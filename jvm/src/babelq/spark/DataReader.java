package babelq.spark;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.catalyst.util.ArrayBasedMapData;
import org.apache.spark.sql.catalyst.util.GenericArrayData;
import org.apache.spark.sql.types.ArrayType;
import org.apache.spark.sql.types.BooleanType;
import org.apache.spark.sql.types.ByteType;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DoubleType;
import org.apache.spark.sql.types.FloatType;
import org.apache.spark.sql.types.IntegerType;
import org.apache.spark.sql.types.LongType;
import org.apache.spark.sql.types.MapType;
import org.apache.spark.sql.types.ShortType;
import org.apache.spark.sql.types.StringType;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * Reads a scanned JSON value into the Java value Spark expects for a data type, so a decoded
 * envelope's {@code data} becomes a struct without a second JSON parse.
 *
 * <p>The rules are {@code from_json}'s for values that fit: a JSON string into a string field,
 * an integer in range into an integral field, any number into a double (float: the double,
 * narrowed), true/false into a boolean, an object into a struct (fields by exact name, the last
 * of repeated keys, missing ones null) or a {@code map<string, _>}, an array into an array.
 * A string field given any other JSON value gets that value's JSON text, as {@code from_json}
 * does. Any other value that does not fit its type is null. Types outside these (decimal,
 * dates, binary...) are not handled here: the Python side checks them first.
 *
 * <p>The reading happens inside the envelope scan itself ({@link #read}): the readers consume
 * the data object with the scanner's own methods as it validates it, so typed data costs no
 * second scan (reading a described value again cost a pass per nesting level).
 *
 * <p>The type is compiled once into a tree of readers; a struct reader matches member names
 * against its fields' UTF-8 bytes, trying the field after the last one matched first (members
 * usually come in schema order), so a member costs no allocation.
 *
 * <p>Two output forms: external ({@code Row}, {@code String}, {@code List}, {@code Map}) for the
 * Java UDF, which Spark then converts value by value, and internal ({@code GenericInternalRow},
 * {@code UTF8String}, {@code GenericArrayData}, {@code ArrayBasedMapData}) for the catalog
 * function {@link EnvelopeScanFunction}, which Spark takes as it is. Only the containers and
 * strings differ; an unescaped string is copied as UTF-8 bytes, never decoded.
 */
final class DataReader {
  private final Reader root;
  private final boolean internal;

  DataReader(StructType schema) {
    this(schema, false);
  }

  DataReader(StructType schema, boolean internal) {
    this.internal = internal;
    this.root = compile(schema, internal);
  }

  /** Whether this reader builds Spark's internal values (else Java UDF values). */
  boolean internal() {
    return internal;
  }

  /**
   * Reads the value where {@code s} stands (whitespace allowed) as the struct, consuming it with
   * the scanner's own methods at {@code depth} (as {@link JsonScanner#value} would): the data
   * object is validated and converted in one pass, never scanned twice. Not an object: null.
   */
  Object read(JsonScanner s, int depth) {
    return root.read(s, depth);
  }

  /** Converts the value where the scanner stands, consuming it; JSON null gives null. */
  private interface Reader {
    Object read(JsonScanner s, int depth);
  }

  /** Converts one already scanned scalar value (never JSON null). */
  private interface Scalar {
    Object read(byte[] b, JsonScanner.Value v);
  }

  private static Reader scalar(Scalar convert) {
    return (s, depth) -> {
      JsonScanner.Value v = s.describe(depth);
      return v.kind == JsonScanner.NULL ? null : convert.read(s.b, v);
    };
  }

  /** Consumes a value of another kind than the reader wants (validating it): null. */
  private static Object skip(JsonScanner s, int depth) {
    s.value(depth);
    return null;
  }

  private static Reader compile(DataType type, boolean internal) {
    if (type instanceof StructType) {
      return new StructReader((StructType) type, internal);
    }
    if (type instanceof ArrayType) {
      Reader element = compile(((ArrayType) type).elementType(), internal);
      return (s, depth) -> {
        s.skipWhitespace();
        if (s.peek() != '[') {
          return skip(s, depth);
        }
        List<Object> out = new ArrayList<>();
        s.array(depth + 1, new JsonScanner.Elements() {
          @Override
          public void element(JsonScanner.Value value) {
            throw new IllegalStateException("elements are read in place");
          }

          @Override
          public void read(JsonScanner scanner, int at) {
            out.add(element.read(scanner, at));
          }
        });
        return internal ? new GenericArrayData(out.toArray()) : out;
      };
    }
    if (type instanceof MapType && ((MapType) type).keyType() instanceof StringType) {
      Reader value = compile(((MapType) type).valueType(), internal);
      return (s, depth) -> map(s, depth, value, internal);
    }
    if (type instanceof StringType && internal) {
      return scalar((b, v) -> v.kind == JsonScanner.STRING
          ? utf8(b, v)
          : UTF8String.fromBytes(Arrays.copyOfRange(b, v.start, v.end)));
    }
    if (type instanceof StringType) {
      return scalar((b, v) -> v.kind == JsonScanner.STRING
          ? JsonScanner.text(b, v)
          : new String(b, v.start, v.end - v.start, StandardCharsets.UTF_8));
    }
    if (type instanceof LongType) {
      return scalar((b, v) -> v.kind == JsonScanner.INTEGER ? JsonScanner.longValue(b, v) : null);
    }
    if (type instanceof IntegerType) {
      return scalar((b, v) -> {
        Long n = v.kind == JsonScanner.INTEGER ? JsonScanner.longValue(b, v) : null;
        return n != null && n >= Integer.MIN_VALUE && n <= Integer.MAX_VALUE ? Integer.valueOf(n.intValue()) : null;
      });
    }
    if (type instanceof ShortType) {
      return scalar((b, v) -> {
        Long n = v.kind == JsonScanner.INTEGER ? JsonScanner.longValue(b, v) : null;
        return n != null && n >= Short.MIN_VALUE && n <= Short.MAX_VALUE ? Short.valueOf(n.shortValue()) : null;
      });
    }
    if (type instanceof ByteType) {
      return scalar((b, v) -> {
        Long n = v.kind == JsonScanner.INTEGER ? JsonScanner.longValue(b, v) : null;
        return n != null && n >= Byte.MIN_VALUE && n <= Byte.MAX_VALUE ? Byte.valueOf(n.byteValue()) : null;
      });
    }
    if (type instanceof DoubleType) {
      return scalar((b, v) -> number(b, v) ? Double.valueOf(parse(b, v)) : null);
    }
    if (type instanceof FloatType) {
      return scalar((b, v) -> number(b, v) ? Float.valueOf((float) parse(b, v)) : null);
    }
    if (type instanceof BooleanType) {
      return scalar((b, v) -> v.kind == JsonScanner.TRUE ? Boolean.TRUE : v.kind == JsonScanner.FALSE ? Boolean.FALSE : null);
    }
    throw new IllegalArgumentException("babelq DataReader: unsupported type " + type.simpleString());
  }

  /**
   * A scanned string value as Spark's internal string: the scanner validated the UTF-8, so an
   * unescaped string's bytes are the string (no decode and encode through a Java String).
   */
  static UTF8String utf8(byte[] b, JsonScanner.Value v) {
    return v.escaped
        ? UTF8String.fromString(JsonScanner.unescape(b, v.start + 1, v.end - 1))
        : UTF8String.fromBytes(Arrays.copyOfRange(b, v.start + 1, v.end - 1));
  }

  private static boolean number(byte[] b, JsonScanner.Value v) {
    return v.kind == JsonScanner.INTEGER || v.kind == JsonScanner.FLOAT;
  }

  private static double parse(byte[] b, JsonScanner.Value v) {
    return Double.parseDouble(new String(b, v.start, v.end - v.start, StandardCharsets.ISO_8859_1));
  }

  private static Object map(JsonScanner s, int depth, Reader value, boolean internal) {
    s.skipWhitespace();
    if (s.peek() != '{') {
      return skip(s, depth);
    }
    byte[] b = s.b;
    Map<String, Object> out = new LinkedHashMap<>();
    s.object(depth + 1, new JsonScanner.Members() {
      @Override
      public boolean wants(int start, int end, boolean escaped) {
        return true;
      }

      @Override
      public void member(int start, int end, boolean escaped, JsonScanner.Value item) {
        throw new IllegalStateException("members are read in place");
      }

      @Override
      public void read(JsonScanner scanner, int at, int start, int end, boolean escaped) {
        String key = escaped
            ? JsonScanner.unescape(b, start, end)
            : new String(b, start, end - start, StandardCharsets.UTF_8);
        // a repeated key: the last value, at the first one's place (as a Python dict keeps it)
        out.put(key, value.read(scanner, at));
      }
    });
    if (!internal) {
      return out;
    }
    Object[] keys = new Object[out.size()];
    Object[] values = new Object[out.size()];
    int i = 0;
    for (Map.Entry<String, Object> entry : out.entrySet()) {
      keys[i] = UTF8String.fromString(entry.getKey());
      values[i++] = entry.getValue();
    }
    return new ArrayBasedMapData(new GenericArrayData(keys), new GenericArrayData(values));
  }

  /** A struct type compiled: field names as UTF-8 bytes, one reader per field. */
  private static final class StructReader implements Reader {
    private final byte[][] names;
    private final Map<String, Integer> index = new HashMap<>();
    private final Reader[] readers;
    private final boolean internal;

    StructReader(StructType type, boolean internal) {
      this.internal = internal;
      StructField[] fields = type.fields();
      names = new byte[fields.length][];
      readers = new Reader[fields.length];
      for (int i = 0; i < fields.length; i++) {
        names[i] = fields[i].name().getBytes(StandardCharsets.UTF_8);
        index.put(fields[i].name(), Integer.valueOf(i));
        readers[i] = compile(fields[i].dataType(), internal);
      }
    }

    @Override
    public Object read(JsonScanner s, int depth) {
      s.skipWhitespace();
      if (s.peek() != '{') {
        return skip(s, depth);
      }
      byte[] b = s.b;
      Object[] values = new Object[names.length];
      s.object(depth + 1, new JsonScanner.Members() {
        private int next; // the field expected next: members usually come in schema order
        private int found = -1;

        @Override
        public boolean wants(int start, int end, boolean escaped) {
          found = escaped ? slowFind(b, start, end) : find(b, start, end);
          return found >= 0;
        }

        private int find(byte[] bytes, int start, int end) {
          int n = names.length;
          for (int k = 0; k < n; k++) {
            int i = next + k < n ? next + k : next + k - n;
            if (same(names[i], bytes, start, end)) {
              next = i + 1 == n ? 0 : i + 1;
              return i;
            }
          }
          return -1;
        }

        @Override
        public void member(int start, int end, boolean escaped, JsonScanner.Value item) {
          throw new IllegalStateException("members are read in place");
        }

        @Override
        public void read(JsonScanner scanner, int at, int start, int end, boolean escaped) {
          values[found] = readers[found].read(scanner, at);
        }
      });
      return internal ? new GenericInternalRow(values) : RowFactory.create(values);
    }

    private int slowFind(byte[] b, int start, int end) {
      Integer i = index.get(JsonScanner.unescape(b, start, end));
      return i == null ? -1 : i.intValue();
    }

    private static boolean same(byte[] name, byte[] b, int start, int end) {
      if (end - start != name.length) {
        return false;
      }
      for (int i = 0; i < name.length; i++) {
        if (name[i] != b[start + i]) {
          return false;
        }
      }
      return true;
    }
  }

  /** Compile-time check used by tests and callers: the reader accepts this type. */
  static boolean supports(DataType type) {
    try {
      compile(type, false);
      return true;
    } catch (IllegalArgumentException unsupported) {
      return false;
    }
  }
}
