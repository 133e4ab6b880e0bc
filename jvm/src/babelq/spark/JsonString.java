package babelq.spark;

import org.apache.spark.sql.connector.catalog.functions.BoundFunction;
import org.apache.spark.sql.connector.catalog.functions.ScalarFunction;
import org.apache.spark.sql.connector.catalog.functions.UnboundFunction;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StringType;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * The canonical JSON string token of a string (quoted, escaped as {@link DataJson} escapes), for
 * the envelope's own string fields that come from a column ({@code trace_id}, {@code sharding_key}...).
 *
 * <p>The Spark SQL spelling of the same escape runs a regex test and two to thirty-four
 * {@code replace} calls per value; this looks at each byte once. Served by {@link Functions};
 * null stays null.
 */
public final class JsonString implements UnboundFunction {
  private static final long serialVersionUID = 1L;

  /** The function name; {@link Functions} serves it. */
  public static final String NAME = "json_string_v1";

  @Override
  public String name() {
    return NAME;
  }

  @Override
  public String description() {
    return "json_string_v1(string): the canonical JSON string token of a string (babelq)";
  }

  @Override
  public BoundFunction bind(StructType inputType) {
    if (inputType.fields().length != 1 || !(inputType.fields()[0].dataType() instanceof StringType)) {
      throw new UnsupportedOperationException(NAME + " takes one string argument");
    }
    return new Bound(inputType.fields()[0].dataType());
  }

  /** The bound function, for the argument's string type (collations included). */
  public static final class Bound implements ScalarFunction<UTF8String> {
    private static final long serialVersionUID = 1L;
    private static final UTF8String QUOTE = UTF8String.fromString("\"");
    private static final ThreadLocal<DataJson.Out> SCRATCH = ThreadLocal.withInitial(DataJson.Out::new);

    private final DataType input;

    Bound(DataType input) {
      this.input = input;
    }

    @Override
    public DataType[] inputTypes() {
      return new DataType[] {input};
    }

    @Override
    public DataType resultType() {
      return DataTypes.StringType;
    }

    @Override
    public String name() {
      return NAME;
    }

    @Override
    public String canonicalName() {
      return "babelq." + NAME;
    }

    /** Spark's magic method, called from generated code. */
    public UTF8String invoke(UTF8String s) {
      if (s == null) {
        return null;
      }
      if (DataJson.Out.plain(s)) {
        return UTF8String.concat(QUOTE, s, QUOTE);
      }
      DataJson.Out out = SCRATCH.get();
      out.len = 0;
      out.string(s);
      return UTF8String.fromBytes(out.take());
    }

    @Override
    public UTF8String produceResult(org.apache.spark.sql.catalyst.InternalRow input) {
      return invoke(input.isNullAt(0) ? null : input.getUTF8String(0));
    }
  }
}
