package babelq.spark;

import org.apache.spark.sql.Row;
import org.apache.spark.sql.api.java.UDF2;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.StructType;

/**
 * {@link EnvelopeScan} with {@code data} read into a struct ({@link DataReader}) in the same
 * pass. The second argument is the struct's type as Spark's JSON (a literal: the Python side
 * registers one function per data type, declaring the matching return type).
 */
public final class EnvelopeScanTyped implements UDF2<byte[], String, Row> {
  private static final long serialVersionUID = 1L;

  private transient String schemaJson;
  private transient DataReader reader;

  @Override
  public Row call(byte[] body, String schema) {
    if (schema == null) {
      return null;
    }
    DataReader typed = reader;
    if (typed == null || !schema.equals(schemaJson)) {
      typed = new DataReader((StructType) DataType.fromJson(schema));
      reader = typed;
      schemaJson = schema;
    }
    return EnvelopeScan.scan(body, typed);
  }

  /** Whether {@link DataReader} converts every type inside the struct given as Spark's JSON. */
  public static boolean supports(String schema) {
    return DataReader.supports(DataType.fromJson(schema));
  }
}
