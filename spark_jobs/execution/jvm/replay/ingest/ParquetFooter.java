package replay.ingest;

import java.io.IOException;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.Path;
import org.apache.parquet.hadoop.ParquetFileReader;
import org.apache.parquet.hadoop.util.HadoopInputFile;
import org.apache.spark.SparkEnv;
import org.apache.spark.deploy.SparkHadoopUtil;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.api.java.UDF1;

/**
 * A Parquet file's footer: the rows it declares, or why it cannot be read. Only a damaged or
 * foreign file is a problem to report; an I/O failure (a missing file, a network error,
 * throttling) is thrown, since quarantining the file would lose it for good.
 *
 * <p>Called on the driver through Py4J ({@link #read}), and as a SQL function (a Spark Connect
 * client has no JVM of its own): one home for the rule either way.
 */
public final class ParquetFooter implements UDF1<String, Row> {
  /** {@code [problem or null, rows]}. */
  public static Object[] read(Configuration conf, String path) throws IOException {
    try (ParquetFileReader reader =
        ParquetFileReader.open(HadoopInputFile.fromPath(new Path(path), conf))) {
      return new Object[] {null, reader.getRecordCount()};
    } catch (RuntimeException | IOException error) {
      String kind = error.getClass().getName();
      String message = String.valueOf(error.getMessage());
      // Parquet reports a bad magic number or a too-short file as a bare RuntimeException and an
      // undecodable footer as an IOException about its Thrift classes.
      if (kind.equals("java.lang.RuntimeException") || kind.startsWith("org.apache.parquet")
          || message.contains("org.apache.parquet.format")) {
        return new Object[] {"not a readable Parquet file: " + message, 0L};
      }
      throw error;
    }
  }

  @Override
  public Row call(String path) throws IOException {
    Configuration conf = SparkHadoopUtil.get().newConfiguration(SparkEnv.get().conf());
    Object[] found = read(conf, path);
    return RowFactory.create(found[0], found[1]);
  }
}
