package babelq.spark;

import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.catalog.functions.BoundFunction;
import org.apache.spark.sql.connector.catalog.functions.ScalarFunction;
import org.apache.spark.sql.connector.catalog.functions.UnboundFunction;
import org.apache.spark.sql.types.BinaryType;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;

/**
 * {@link EnvelopeScan} and {@link EnvelopeScanTyped} as a catalog function (served by
 * {@link Functions}): {@code envelope_scan_v1(body)} keeps {@code data} as its text's bytes,
 * {@code envelope_scan_v1(body, cast(null as struct<...>))} reads it into that struct.
 *
 * <p>Why: a Java UDF returns a {@code Row} that Spark converts to its internal form value by
 * value, which for a typed payload cost about as much as the scan itself. The magic
 * {@code invoke} here returns the internal row directly. The second argument only carries the
 * data type to {@link #bind} (a function's options never reach it; its argument types do): its
 * value is ignored. Same rows, same nulls as the UDFs: the Python side reads them the same way.
 */
public final class EnvelopeScanFunction implements UnboundFunction {
  private static final long serialVersionUID = 1L;

  /** The function's name in {@link Functions}. */
  public static final String NAME = "envelope_scan_v1";

  /** The result type with {@code data} as binary (the same fields as the Python side's SCAN_DDL). */
  static final String DDL =
      "accepted boolean, urn string, trace_id string, id string, queue string, lang string, "
          + "schema_version bigint, created_at bigint, attempts bigint, correlation_id string, "
          + "sharding_key string, deliver_at bigint, expire_at bigint, priority bigint, "
          + "transaction_id string, data binary, dead_letter struct<reason: string, error: string, "
          + "exception: string, failed_at: bigint, original_queue: string, attempts: bigint, "
          + "lang: string, cause: string>, poison string";

  @Override
  public String name() {
    return NAME;
  }

  @Override
  public String description() {
    return NAME + "(body binary[, typed null struct]): babelq's one-pass envelope scan";
  }

  @Override
  public BoundFunction bind(StructType inputType) {
    StructField[] args = inputType.fields();
    if (args.length < 1 || args.length > 2 || !(args[0].dataType() instanceof BinaryType)) {
      throw new UnsupportedOperationException(NAME + " takes (binary) or (binary, struct)");
    }
    StructType text = StructType.fromDDL(DDL);
    if (args.length == 1) {
      return new Bound(new DataType[] {DataTypes.BinaryType}, text, null);
    }
    if (!(args[1].dataType() instanceof StructType) || !DataReader.supports(args[1].dataType())) {
      throw new UnsupportedOperationException(NAME + ": the data type must be a struct DataReader reads");
    }
    StructType data = (StructType) args[1].dataType();
    StructField[] fields = text.fields().clone();
    for (int i = 0; i < fields.length; i++) {
      if (fields[i].name().equals("data")) {
        fields[i] = new StructField("data", data, true, fields[i].metadata());
      }
    }
    return new Bound(new DataType[] {DataTypes.BinaryType, data}, new StructType(fields), data);
  }

  /**
   * The bound scan. It travels to the executors inside the generated code's references, so it
   * keeps the data type and compiles the reader (internal values, immutable once built) on first
   * use in each JVM.
   */
  public static final class Bound implements ScalarFunction<InternalRow> {
    private static final long serialVersionUID = 1L;

    private final DataType[] inputs;
    private final StructType result;
    private final StructType data;
    private transient volatile DataReader reader;

    Bound(DataType[] inputs, StructType result, StructType data) {
      this.inputs = inputs;
      this.result = result;
      this.data = data;
    }

    private DataReader reader() {
      DataReader r = reader;
      if (r == null) { // a race builds two equal readers: harmless
        r = new DataReader(data, true);
        reader = r;
      }
      return r;
    }

    @Override
    public DataType[] inputTypes() {
      return inputs.clone();
    }

    @Override
    public DataType resultType() {
      return result;
    }

    @Override
    public String name() {
      return NAME;
    }

    @Override
    public String canonicalName() {
      return "babelq." + NAME + "(" + (data == null ? "" : data.catalogString()) + ")";
    }

    /** Spark's magic method for {@code envelope_scan_v1(body)}. */
    public InternalRow invoke(byte[] body) {
      return EnvelopeScan.scanInternal(body, null);
    }

    /** Spark's magic method for {@code envelope_scan_v1(body, typed null)}: the value is ignored. */
    public InternalRow invoke(byte[] body, InternalRow ignored) {
      return EnvelopeScan.scanInternal(body, reader());
    }

    @Override
    public InternalRow produceResult(InternalRow input) {
      byte[] body = input.isNullAt(0) ? null : input.getBinary(0);
      return data == null ? invoke(body) : invoke(body, null);
    }
  }
}
