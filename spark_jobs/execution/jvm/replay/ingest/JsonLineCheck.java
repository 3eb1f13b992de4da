package replay.ingest;

import com.fasterxml.jackson.core.JsonEncoding;
import com.fasterxml.jackson.core.JsonFactory;
import com.fasterxml.jackson.core.JsonGenerator;
import com.fasterxml.jackson.core.JsonParser;
import com.fasterxml.jackson.core.JsonToken;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * The strict check of one JSON Lines line: exactly one JSON object and nothing after it, with the
 * text of each wanted top-level field.
 *
 * <p>A field's text is what Spark's {@code from_json} gives a STRING field: a JSON string's value,
 * NULL for JSON null, and any other value (number, boolean, object, array) re-serialised by
 * Jackson's generator ({@code 1e3} gives {@code 1000.0}), so that keys and typed values keep the
 * meaning they had with {@code from_json}. Jackson's defaults are strict JSON: no single quotes,
 * NaN, comments, unquoted names or leading zeros. A duplicated field keeps its last value.
 */
final class JsonLineCheck {
  static final String MALFORMED = "malformed_json";
  static final String NOT_AN_OBJECT = "not_an_object";
  static final String INVALID_UTF8 =
      "not valid UTF-8 (RFC 8259 requires it; invalid bytes are shown as U+FFFD)";

  private static final UTF8String MALFORMED_REASON = UTF8String.fromString(MALFORMED);
  private static final UTF8String NOT_ONE_VALUE = UTF8String.fromString("not one valid JSON value");
  private static final UTF8String NOT_AN_OBJECT_REASON = UTF8String.fromString(NOT_AN_OBJECT);

  private final JsonFactory factory = new JsonFactory();
  private final Map<String, Integer> fieldIndex = new HashMap<>();
  private final int width;
  private final ByteArrayOutputStream generated = new ByteArrayOutputStream(64);

  JsonLineCheck(List<String> fields) {
    for (int i = 0; i < fields.size(); i++) {
      fieldIndex.put(fields.get(i), i);
    }
    width = fields.size();
  }

  int width() {
    return width;
  }

  /**
   * Checks {@code bytes[offset, offset + length)} (valid UTF-8) and writes into {@code out} from
   * {@code at}: the reason (NULL for an object), the detail, then each field's text.
   */
  void check(byte[] bytes, int offset, int length, Object[] out, int at) {
    for (int i = at; i < at + 2 + width; i++) {
      out[i] = null;
    }
    try (JsonParser parser = factory.createParser(bytes, offset, length)) {
      JsonToken first = parser.nextToken();
      if (first != JsonToken.START_OBJECT) {
        // Not an object: is the line one valid JSON value at all, and which kind?
        if (first != null) {
          parser.skipChildren();
        }
        if (first != null && parser.nextToken() == null) {
          out[at] = NOT_AN_OBJECT_REASON;
          out[at + 1] = UTF8String.fromString("valid JSON but " + kind(first) + ", not an object");
        } else {
          malformed(out, at);
        }
        return;
      }
      JsonToken token;
      while ((token = parser.nextToken()) == JsonToken.FIELD_NAME) {
        Integer field = fieldIndex.get(parser.currentName());
        JsonToken value = parser.nextToken();
        if (field == null) {
          parser.skipChildren();
        } else if (value == JsonToken.VALUE_STRING) {
          out[at + 2 + field] = stringText(parser, bytes, offset, length);
        } else if (value == JsonToken.VALUE_NULL) {
          out[at + 2 + field] = null;
        } else if (value == JsonToken.VALUE_NUMBER_INT) {
          out[at + 2 + field] = integerText(parser, bytes, offset, length);
        } else {
          out[at + 2 + field] = UTF8String.fromString(generatedText(parser, value));
        }
      }
      // The object must close, and nothing may follow it ("{..} junk", "{..}{..}", "{..},").
      if (token != JsonToken.END_OBJECT || parser.nextToken() != null) {
        malformed(out, at);
      }
    } catch (IOException error) {
      malformed(out, at);
    }
  }

  /**
   * A string value's text: its bytes as they are in the line when it has no escape (the line is
   * valid UTF-8 already), which spares decoding it into a Java string and encoding it back; else
   * Jackson's decoded text. Jackson still checks the string when it moves past it.
   */
  private static UTF8String stringText(JsonParser parser, byte[] bytes, int offset, int length)
      throws IOException {
    long quote = parser.currentTokenLocation().getByteOffset(); // counted from offset
    if (quote >= 0 && quote < length && bytes[offset + (int) quote] == '"') {
      int from = offset + (int) quote + 1;
      for (int i = from; i < offset + length; i++) {
        byte b = bytes[i];
        if (b == '"') {
          return UTF8String.fromBytes(Arrays.copyOfRange(bytes, from, i));
        }
        if (b == '\\') {
          break;
        }
      }
    }
    return UTF8String.fromString(parser.getText());
  }

  /** An integer's text, its digits as they are in the line (canonical JSON) but for {@code -0}. */
  private UTF8String integerText(JsonParser parser, byte[] bytes, int offset, int length)
      throws IOException {
    long start = parser.currentTokenLocation().getByteOffset();
    int digits = parser.getTextLength();
    if (start >= 0 && start + digits <= length && !(digits == 2 && bytes[offset + (int) start] == '-'
        && bytes[offset + (int) start + 1] == '0')) {
      int from = offset + (int) start;
      byte first = bytes[from];
      byte last = bytes[from + digits - 1];
      if ((first == '-' || (first >= '0' && first <= '9')) && last >= '0' && last <= '9') {
        return UTF8String.fromBytes(Arrays.copyOfRange(bytes, from, from + digits));
      }
    }
    return UTF8String.fromString(generatedText(parser, JsonToken.VALUE_NUMBER_INT));
  }

  /**
   * What Jackson's generator writes for the current value ({@code copyCurrentStructure}), without
   * a generator for the common scalars: an integer's text is canonical but for {@code -0}, and
   * a finite float is written as {@link Double#toString}. (Checked against the generator.)
   */
  private String generatedText(JsonParser parser, JsonToken value) throws IOException {
    if (value == JsonToken.VALUE_NUMBER_INT) {
      String text = parser.getText();
      return text.equals("-0") ? "0" : text;
    }
    if (value == JsonToken.VALUE_NUMBER_FLOAT) {
      double number = parser.getDoubleValue();
      if (Double.isFinite(number)) {
        return Double.toString(number);
      }
    } else if (value == JsonToken.VALUE_TRUE) {
      return "true";
    } else if (value == JsonToken.VALUE_FALSE) {
      return "false";
    }
    generated.reset();
    try (JsonGenerator generator = factory.createGenerator(generated, JsonEncoding.UTF8)) {
      generator.copyCurrentStructure(parser);
    }
    return generated.toString(StandardCharsets.UTF_8);
  }

  private void malformed(Object[] out, int at) {
    for (int i = at; i < at + 2 + width; i++) {
      out[i] = null;
    }
    out[at] = MALFORMED_REASON;
    out[at + 1] = NOT_ONE_VALUE;
  }

  private static String kind(JsonToken token) {
    switch (token) {
      case START_ARRAY:
        return "an array";
      case VALUE_STRING:
        return "a string";
      case VALUE_NULL:
        return "null";
      case VALUE_TRUE:
      case VALUE_FALSE:
        return "a boolean";
      default:
        return "a number";
    }
  }

  /** Strict UTF-8 (no overlong forms, surrogates or code points above U+10FFFF), as RFC 3629. */
  static boolean isValidUtf8(byte[] bytes, int offset, int length) {
    int i = offset;
    int end = offset + length;
    while (i < end) {
      int b = bytes[i] & 0xff;
      if (b < 0x80) {
        i++;
        continue;
      }
      int need;
      int min;
      if (b >= 0xc2 && b <= 0xdf) {
        need = 1;
        min = 0x80;
      } else if (b >= 0xe0 && b <= 0xef) {
        need = 2;
        min = 0x800;
      } else if (b >= 0xf0 && b <= 0xf4) {
        need = 3;
        min = 0x10000;
      } else {
        return false;
      }
      if (i + need >= end) {
        return false; // the sequence is cut short by the end of the line
      }
      int code = b & (0xff >> (need + 2));
      for (int k = 1; k <= need; k++) {
        int c = bytes[i + k] & 0xff;
        if ((c & 0xc0) != 0x80) {
          return false;
        }
        code = (code << 6) | (c & 0x3f);
      }
      if (code < min || code > 0x10ffff || (code >= 0xd800 && code <= 0xdfff)) {
        return false;
      }
      i += need + 1;
    }
    return true;
  }
}
