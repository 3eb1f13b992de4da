package replay.delta;

import java.io.IOException;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;

/**
 * The latest version of each of several Delta tables, from a listing of their {@code _delta_log}
 * directories: one call from Python for all of them, where iterating a listing through Py4J costs
 * a round trip per file (a log of 450 files: 64 ms a table), and no Spark job, as a snapshot's
 * update would be.
 */
public final class LogVersions {
  private LogVersions() {}

  /** Each table's latest commit version, or -1 where the table has no log (it does not exist). */
  public static long[] latest(Configuration conf, String[] tablePaths) throws IOException {
    long[] versions = new long[tablePaths.length];
    for (int i = 0; i < tablePaths.length; i++) {
      versions[i] = latest(conf, tablePaths[i]);
    }
    return versions;
  }

  private static long latest(Configuration conf, String tablePath) throws IOException {
    Path log = new Path(tablePath, "_delta_log");
    FileSystem fs = log.getFileSystem(conf);
    if (!fs.exists(log)) {
      return -1;
    }
    long latest = -1;
    for (FileStatus status : fs.listStatus(log)) {
      String name = status.getPath().getName();
      if (name.length() > 5 && name.endsWith(".json") && isDigits(name, name.length() - 5)) {
        latest = Math.max(latest, Long.parseLong(name.substring(0, name.length() - 5)));
      }
    }
    return latest;
  }

  private static boolean isDigits(String text, int end) {
    for (int i = 0; i < end; i++) {
      if (!Character.isDigit(text.charAt(i))) {
        return false;
      }
    }
    return true;
  }
}
