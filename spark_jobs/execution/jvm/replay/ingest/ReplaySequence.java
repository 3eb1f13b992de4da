package replay.ingest;

import java.io.DataInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.util.HashMap;
import java.util.Map;
import org.apache.spark.SparkFiles;
import org.apache.spark.sql.api.java.UDF3;

/**
 * {@code (positions file, file index, line) -> replay position} (NULL when the record has none):
 * the lookup that numbers an ingest's records, from the table the driver sorted and shipped with
 * {@code SparkContext.addFile}. The file is read once per JVM (the last one used is kept).
 *
 * <p>Layout, little-endian: {@code "RPOS"}, the number of archive files, then per file its index
 * (int32), its first line (int64), the number of lines covered (int32) and one int32 position per
 * line from the first (-1 for a line that is not a record).
 */
public final class ReplaySequence implements UDF3<String, Integer, Long, Long> {
  private static final long serialVersionUID = 1L;
  private static volatile Positions last;

  @Override
  public Long call(String name, Integer fileIndex, Long line) throws IOException {
    Positions positions = last;
    if (positions == null || !positions.name.equals(name)) {
      positions = load(name);
    }
    long[] first = positions.firstLines.get(fileIndex);
    int[] table = positions.tables.get(fileIndex);
    if (table == null || line == null) {
      return null;
    }
    long at = line - first[0];
    if (at < 0 || at >= table.length || table[(int) at] < 0) {
      return null;
    }
    return (long) table[(int) at];
  }

  /**
   * Where Spark put the file the driver shipped: the files' root directory for SparkContext.addFile,
   * or a session's own directory below it for a Spark Connect session's file artifact (names are
   * unique: the driver puts a random UUID in each).
   */
  static java.nio.file.Path shipped(String name) throws IOException {
    java.nio.file.Path direct = Paths.get(SparkFiles.get(name));
    if (Files.exists(direct)) {
      return direct;
    }
    java.nio.file.Path root = Paths.get(SparkFiles.getRootDirectory());
    try (java.util.stream.Stream<java.nio.file.Path> sessions = Files.list(root)) {
      return sessions.map(session -> session.resolve(name)).filter(Files::exists).findFirst()
          .orElse(direct);
    }
  }

  private static synchronized Positions load(String name) throws IOException {
    Positions positions = last;
    if (positions != null && positions.name.equals(name)) {
      return positions;
    }
    positions = new Positions(name);
    try (InputStream file = Files.newInputStream(shipped(name));
        DataInputStream in = new DataInputStream(new java.io.BufferedInputStream(file, 1 << 20))) {
      byte[] magic = new byte[4];
      in.readFully(magic);
      if (!"RPOS".equals(new String(magic, java.nio.charset.StandardCharsets.US_ASCII))) {
        throw new IOException(name + " is not a positions file");
      }
      int files = Integer.reverseBytes(in.readInt());
      for (int f = 0; f < files; f++) {
        int index = Integer.reverseBytes(in.readInt());
        long first = Long.reverseBytes(in.readLong());
        int length = Integer.reverseBytes(in.readInt());
        byte[] raw = new byte[length * 4];
        in.readFully(raw);
        int[] table = new int[length];
        ByteBuffer.wrap(raw).order(ByteOrder.LITTLE_ENDIAN).asIntBuffer().get(table);
        positions.tables.put(index, table);
        positions.firstLines.put(index, new long[] {first});
      }
    }
    last = positions;
    return positions;
  }

  private static final class Positions {
    final String name;
    final Map<Integer, int[]> tables = new HashMap<>();
    final Map<Integer, long[]> firstLines = new HashMap<>();

    Positions(String name) {
      this.name = name;
    }
  }
}
