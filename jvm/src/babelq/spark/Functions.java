package babelq.spark;

import java.util.BitSet;
import org.apache.spark.sql.catalyst.analysis.NoSuchFunctionException;
import org.apache.spark.sql.connector.catalog.FunctionCatalog;
import org.apache.spark.sql.connector.catalog.Identifier;
import org.apache.spark.sql.connector.catalog.functions.UnboundFunction;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * A function-only DataSource V2 catalog serving babelq's JSON writers for encode: {@link DataJson}
 * (the data object) and {@link JsonString} (one string token), and decode's envelope scan
 * returning Spark's internal row ({@link EnvelopeScanFunction}).
 *
 * <p>Java UDFs receive {@code Row} objects converted from Spark's internal rows, which for a
 * nested payload costs about as much as writing its JSON; catalog functions with a magic
 * {@code invoke} method are called on the internal row directly. {@code babelq.spark.jvm}
 * registers this class as {@code spark.sql.catalog.<name>} and calls
 * {@code <name>.data_json_v1(struct)} and {@code <name>.json_string_v1(string)}. Top-level fields to leave out when null are named in the
 * function name, by index: {@code data_json_v1_omit_0_3} omits fields 0 and 3 (the argument's
 * type only reaches the function at bind time, its options never do).
 */
public final class Functions implements FunctionCatalog {
  private String name = "babelq";

  @Override
  public void initialize(String name, CaseInsensitiveStringMap options) {
    this.name = name;
  }

  @Override
  public String name() {
    return name;
  }

  @Override
  public Identifier[] listFunctions(String[] namespace) {
    return new Identifier[] {
      Identifier.of(new String[0], DataJson.NAME),
      Identifier.of(new String[0], JsonString.NAME),
      Identifier.of(new String[0], EnvelopeScanFunction.NAME)
    };
  }

  @Override
  public UnboundFunction loadFunction(Identifier ident) throws NoSuchFunctionException {
    if (ident.namespace().length == 0 && ident.name().equals(JsonString.NAME)) {
      return new JsonString();
    }
    if (ident.namespace().length == 0 && ident.name().equals(EnvelopeScanFunction.NAME)) {
      return new EnvelopeScanFunction();
    }
    BitSet omit = ident.namespace().length == 0 ? omitted(ident.name()) : null;
    if (omit == null) {
      throw new NoSuchFunctionException(ident);
    }
    return new DataJson(omit);
  }

  /** The omit set named by {@code data_json_v1[_omit_I_J...]}, or null for any other name. */
  static BitSet omitted(String function) {
    BitSet omit = new BitSet();
    if (function.equals(DataJson.NAME)) {
      return omit;
    }
    String prefix = DataJson.NAME + "_omit";
    if (!function.startsWith(prefix) || function.length() == prefix.length()) {
      return null;
    }
    for (String index : function.substring(prefix.length() + 1).split("_", -1)) {
      if (index.isEmpty() || index.length() > 6 || !index.chars().allMatch(Character::isDigit)) {
        return null;
      }
      omit.set(Integer.parseInt(index));
    }
    return function.charAt(prefix.length()) == '_' ? omit : null;
  }
}
