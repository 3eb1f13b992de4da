package replay.ingest;

import com.fasterxml.jackson.core.type.TypeReference;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.IOException;
import java.io.InputStream;
import java.io.Serializable;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.EnumSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.catalog.TableProvider;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.connector.read.Batch;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;
import org.apache.spark.unsafe.types.UTF8String;
import org.apache.spark.util.SerializableConfiguration;

/**
 * Plain (uncompressed) JSON Lines files read and checked in one pass, one task per file.
 *
 * <p>Options: {@code files}, a JSON array of {@code [path, file index]} pairs, or of {@code [path,
 * file index, [line, ...]]} to read only those lines (ascending); {@code fields}, a JSON array of
 * the top-level field names to extract. One row per non-blank line: {@code _file,
 * _file_index, _line} (the physical line number, blank lines counted), {@code _raw} (the line
 * without its line break, and without the byte-order mark that may open the file; invalid UTF-8
 * shown as U+FFFD), {@code _pre_reason, _pre_detail} (NULL for one JSON object, else why not, see {@link
 * JsonLineCheck}), then {@code _text0 ...} per field. A line ends at {@code \n}; the {@code \r}
 * of {@code \r\n} is dropped; a line of spaces, tabs and {@code \r} only is blank.
 */
public final class JsonLinesSource implements TableProvider {
  static final int FIXED_COLUMNS = 6;

  @Override
  public StructType inferSchema(CaseInsensitiveStringMap options) {
    return schema(fields(options.get("fields")));
  }

  @Override
  public Table getTable(StructType schema, Transform[] partitioning, Map<String, String> properties) {
    return new LinesTable(schema, properties.get("files"), properties.get("fields"));
  }

  static StructType schema(List<String> fields) {
    List<StructField> columns = new ArrayList<>();
    columns.add(DataTypes.createStructField("_file", DataTypes.StringType, false));
    columns.add(DataTypes.createStructField("_file_index", DataTypes.IntegerType, false));
    columns.add(DataTypes.createStructField("_line", DataTypes.LongType, false));
    columns.add(DataTypes.createStructField("_raw", DataTypes.StringType, false));
    columns.add(DataTypes.createStructField("_pre_reason", DataTypes.StringType, true));
    columns.add(DataTypes.createStructField("_pre_detail", DataTypes.StringType, true));
    for (int i = 0; i < fields.size(); i++) {
      columns.add(DataTypes.createStructField("_text" + i, DataTypes.StringType, true));
    }
    return DataTypes.createStructType(columns);
  }

  static List<String> fields(String json) {
    try {
      return new ObjectMapper().readValue(json, new TypeReference<List<String>>() {});
    } catch (IOException error) {
      throw new IllegalArgumentException("option fields: not a JSON array of names: " + json, error);
    }
  }

  private static final class LinesTable implements Table, SupportsRead {
    private final StructType schema;
    private final String files;
    private final String fields;

    LinesTable(StructType schema, String files, String fields) {
      this.schema = schema;
      this.files = files;
      this.fields = fields;
    }

    @Override
    public String name() {
      return "json_lines";
    }

    @Override
    @SuppressWarnings("deprecation")
    public StructType schema() {
      return schema;
    }

    @Override
    public Set<TableCapability> capabilities() {
      return EnumSet.of(TableCapability.BATCH_READ);
    }

    @Override
    public ScanBuilder newScanBuilder(CaseInsensitiveStringMap options) {
      return () -> new LinesScan(schema, files, fields);
    }
  }

  private static final class LinesScan implements Scan, Batch {
    private final StructType schema;
    private final String files;
    private final String fields;

    LinesScan(StructType schema, String files, String fields) {
      this.schema = schema;
      this.files = files;
      this.fields = fields;
    }

    @Override
    public StructType readSchema() {
      return schema;
    }

    @Override
    public Batch toBatch() {
      return this;
    }

    @Override
    public InputPartition[] planInputPartitions() {
      List<List<Object>> pairs;
      try {
        pairs = new ObjectMapper().readValue(files, new TypeReference<List<List<Object>>>() {});
      } catch (IOException error) {
        throw new IllegalArgumentException("option files: not a JSON array of [path, index]", error);
      }
      InputPartition[] partitions = new InputPartition[pairs.size()];
      for (int i = 0; i < partitions.length; i++) {
        List<Object> pair = pairs.get(i);
        long[] only = null;
        if (pair.size() > 2) {
          List<?> lines = (List<?>) pair.get(2);
          only = new long[lines.size()];
          for (int k = 0; k < only.length; k++) {
            only[k] = ((Number) lines.get(k)).longValue();
          }
        }
        partitions[i] = new FileInput((String) pair.get(0), ((Number) pair.get(1)).intValue(), only);
      }
      return partitions;
    }

    @Override
    public PartitionReaderFactory createReaderFactory() {
      Configuration hadoop = SparkSession.active().sparkContext().hadoopConfiguration();
      return new Readers(new SerializableConfiguration(hadoop), fields(fields));
    }
  }

  private static final class FileInput implements InputPartition {
    private static final long serialVersionUID = 1L;
    final String path;
    final int index;
    final long[] only; // null: every line

    FileInput(String path, int index, long[] only) {
      this.path = path;
      this.index = index;
      this.only = only;
    }
  }

  private static final class Readers implements PartitionReaderFactory, Serializable {
    private static final long serialVersionUID = 1L;
    private final SerializableConfiguration hadoop;
    private final List<String> fields;

    Readers(SerializableConfiguration hadoop, List<String> fields) {
      this.hadoop = hadoop;
      this.fields = fields;
    }

    @Override
    public PartitionReader<InternalRow> createReader(InputPartition partition) {
      FileInput input = (FileInput) partition;
      try {
        Path path = new Path(input.path);
        FileSystem fs = path.getFileSystem(hadoop.value());
        return new LineReader(fs.open(path), input, new JsonLineCheck(fields));
      } catch (IOException error) {
        throw new RuntimeException("cannot open " + input.path, error);
      }
    }
  }

  /** Cuts a file into lines over a growing buffer, and checks each non-blank one. */
  private static final class LineReader implements PartitionReader<InternalRow> {
    private final InputStream in;
    private final JsonLineCheck check;
    private final UTF8String file;
    private final int fileIndex;
    private final long[] only;
    private int nextWanted;
    private byte[] buffer = new byte[1 << 20];
    private int start;
    private int filled;
    private boolean eof;
    private long line;
    private InternalRow row;

    LineReader(InputStream in, FileInput input, JsonLineCheck check) {
      this.in = in;
      this.check = check;
      this.file = UTF8String.fromString(input.path);
      this.fileIndex = input.index;
      this.only = input.only;
    }

    @Override
    public boolean next() throws IOException {
      while (true) {
        int end = lineEnd();
        if (end < 0) {
          return false;
        }
        int from = start;
        int to = end;
        start = end < filled ? end + 1 : end; // past the \n
        line++;
        if (only != null) {
          if (nextWanted == only.length) {
            return false;
          }
          if (only[nextWanted] != line) {
            continue;
          }
          nextWanted++;
        }
        if (to > from && buffer[to - 1] == '\r') {
          to--;
        }
        if (line == 1 && to - from >= 3 && buffer[from] == (byte) 0xef && buffer[from + 1] == (byte) 0xbb
            && buffer[from + 2] == (byte) 0xbf) {
          from += 3;
        }
        if (isBlank(from, to)) {
          continue;
        }
        Object[] values = new Object[FIXED_COLUMNS + check.width()];
        values[0] = file;
        values[1] = fileIndex;
        values[2] = line;
        if (JsonLineCheck.isValidUtf8(buffer, from, to - from)) {
          values[3] = UTF8String.fromBytes(Arrays.copyOfRange(buffer, from, to));
          check.check(buffer, from, to - from, values, 4);
        } else {
          values[3] = UTF8String.fromString(new String(buffer, from, to - from, StandardCharsets.UTF_8));
          values[4] = UTF8String.fromString(JsonLineCheck.MALFORMED);
          values[5] = UTF8String.fromString(JsonLineCheck.INVALID_UTF8);
        }
        row = new GenericInternalRow(values);
        return true;
      }
    }

    /** The end of the next line in the buffer (reading more as needed), or -1 at end of file. */
    private int lineEnd() throws IOException {
      int scanned = start;
      while (true) {
        for (int i = scanned; i < filled; i++) {
          if (buffer[i] == '\n') {
            return i;
          }
        }
        scanned = filled;
        if (eof) {
          // The last line may lack its \n; a file ending with \n has no line after it.
          return filled > start ? filled : -1;
        }
        if (start > 0) { // keep the unfinished line, drop what was consumed
          System.arraycopy(buffer, start, buffer, 0, filled - start);
          scanned -= start;
          filled -= start;
          start = 0;
        }
        if (filled == buffer.length) {
          buffer = Arrays.copyOf(buffer, buffer.length * 2); // a line longer than the buffer
        }
        int read = in.read(buffer, filled, buffer.length - filled);
        if (read < 0) {
          eof = true;
        } else {
          filled += read;
        }
      }
    }

    private boolean isBlank(int from, int to) {
      for (int i = from; i < to; i++) {
        byte b = buffer[i];
        if (b != ' ' && b != '\t' && b != '\r') {
          return false;
        }
      }
      return true;
    }

    @Override
    public InternalRow get() {
      return row;
    }

    @Override
    public void close() throws IOException {
      in.close();
    }
  }
}
