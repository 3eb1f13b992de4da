package replay.ingest;

import java.nio.charset.StandardCharsets;
import java.util.List;
import org.apache.spark.sql.api.java.UDF2;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;

/**
 * {@link JsonLineCheck} as a UDF, for lines read by other means (gzip files, cut into lines by
 * the Python splitter): {@code (line, fields as a JSON array) -> struct<_reason, _detail, _text0
 * ...>}.
 */
public final class JsonLineFields implements UDF2<String, String, Row> {
  private static final long serialVersionUID = 1L;
  private transient String lastFields;
  private transient JsonLineCheck check;

  @Override
  public Row call(String line, String fields) {
    if (!fields.equals(lastFields)) {
      List<String> names = JsonLinesSource.fields(fields);
      check = new JsonLineCheck(names);
      lastFields = fields;
    }
    Object[] values = new Object[2 + check.width()];
    byte[] bytes = line.getBytes(StandardCharsets.UTF_8);
    check.check(bytes, 0, bytes.length, values, 0);
    Object[] strings = new Object[values.length];
    for (int i = 0; i < values.length; i++) {
      strings[i] = values[i] == null ? null : values[i].toString();
    }
    return RowFactory.create(strings);
  }
}
