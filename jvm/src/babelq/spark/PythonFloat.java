package babelq.spark;

import java.math.BigDecimal;
import org.apache.spark.sql.api.java.UDF1;

/**
 * Python's {@code repr} of a double, the canonical JSON spelling of a float (SPEC section 2).
 *
 * <p>Python writes the shortest decimal that reads back as the same double (the closest one when
 * several are that short), as {@code 1e+20}, {@code 1e-05}, {@code 0.1} or {@code 123.0}. Java 17's
 * {@code Double.toString} is not always shortest, so the digits come from the Schubfach
 * implementation inside Spark's jackson-core, which is shortest except that it never picks one
 * digit when two are closer ({@code 4.9E-324} where Python writes {@code 5e-324}); that case is
 * settled here.
 *
 * <p>Spark SQL calls it as a Java UDF (registered by {@code babelq.spark.jvm}), not through
 * {@code reflect}: {@code reflect} has no generated code, and one such expression takes a whole
 * projection out of Spark's whole-stage code generation.
 */
public final class PythonFloat implements UDF1<Double, String> {
  private static final long serialVersionUID = 1L;

  @Override
  public String call(Double x) {
    return x == null ? null : repr(x.doubleValue());
  }

  /** The repr of {@code x}; null for NaN and infinities, which have no JSON spelling. */
  public static String repr(double x) {
    if (Double.isNaN(x) || Double.isInfinite(x)) {
      return null;
    }
    if (x == 0.0) {
      return (Double.doubleToRawLongBits(x) < 0) ? "-0.0" : "0.0";
    }
    String java = com.fasterxml.jackson.core.io.schubfach.DoubleToDecimal.toString(x);
    boolean negative = java.charAt(0) == '-';
    String unsigned = negative ? java.substring(1) : java;
    int e = unsigned.indexOf('E');
    String mantissa = e < 0 ? unsigned : unsigned.substring(0, e);
    int exp10 = e < 0 ? 0 : Integer.parseInt(unsigned.substring(e + 1));
    int dot = mantissa.indexOf('.');
    String whole = dot < 0 ? mantissa : mantissa.substring(0, dot);
    String raw = dot < 0 ? whole : whole + mantissa.substring(dot + 1);
    // value = 0.raw x 10^decpt
    int decpt = whole.length() + exp10;
    int lead = 0;
    while (lead < raw.length() && raw.charAt(lead) == '0') {
      lead++;
    }
    int trail = raw.length();
    while (trail > lead && raw.charAt(trail - 1) == '0') {
      trail--;
    }
    String digits = raw.substring(lead, trail);
    decpt -= lead;
    if (digits.length() == 2) {
      String[] one = oneDigit(Math.abs(x), digits, decpt);
      if (one != null) {
        digits = one[0];
        decpt = Integer.parseInt(one[1]);
      }
    }
    String text = layout(digits, decpt);
    return negative ? "-" + text : text;
  }

  /** The closest one-digit decimal that reads back as {@code magnitude}, or null if none does. */
  private static String[] oneDigit(double magnitude, String digits, int decpt) {
    int low = digits.charAt(0) - '0';
    int high = low + 1;
    int highDecpt = decpt;
    if (high == 10) {
      high = 1;
      highDecpt = decpt + 1;
    }
    BigDecimal lowValue = new BigDecimal("0." + low + "E" + decpt);
    BigDecimal highValue = new BigDecimal("0." + high + "E" + highDecpt);
    boolean lowOk = lowValue.doubleValue() == magnitude;
    boolean highOk = highValue.doubleValue() == magnitude;
    if (!lowOk && !highOk) {
      return null;
    }
    boolean pickLow;
    if (lowOk && highOk) {
      BigDecimal exact = new BigDecimal(magnitude);
      int cmp = exact.subtract(lowValue).compareTo(highValue.subtract(exact));
      pickLow = cmp < 0 || (cmp == 0 && low % 2 == 0);
    } else {
      pickLow = lowOk;
    }
    return pickLow
        ? new String[] {Integer.toString(low), Integer.toString(decpt)}
        : new String[] {Integer.toString(high), Integer.toString(highDecpt)};
  }

  /** Places {@code digits} (value 0.digits x 10^decpt) the way Python's repr does. */
  private static String layout(String digits, int decpt) {
    int n = digits.length();
    if (decpt > 16 || decpt < -3) {
      int exponent = decpt - 1;
      StringBuilder out = new StringBuilder(n + 8);
      out.append(digits.charAt(0));
      if (n > 1) {
        out.append('.').append(digits, 1, n);
      }
      out.append('e').append(exponent < 0 ? '-' : '+');
      int magnitude = Math.abs(exponent);
      if (magnitude < 10) {
        out.append('0');
      }
      return out.append(magnitude).toString();
    }
    if (decpt <= 0) {
      StringBuilder out = new StringBuilder(n + 2 - decpt);
      out.append("0.");
      for (int i = 0; i < -decpt; i++) {
        out.append('0');
      }
      return out.append(digits).toString();
    }
    if (decpt >= n) {
      StringBuilder out = new StringBuilder(decpt + 2);
      out.append(digits);
      for (int i = n; i < decpt; i++) {
        out.append('0');
      }
      return out.append(".0").toString();
    }
    return digits.substring(0, decpt) + "." + digits.substring(decpt);
  }
}
