package replay.ingest;

import java.io.EOFException;
import java.io.FilterInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import java.util.HashMap;
import java.util.Map;
import org.apache.avro.Schema;
import org.apache.avro.file.CodecFactory;
import org.apache.avro.generic.GenericDatumReader;
import org.apache.avro.io.BinaryDecoder;
import org.apache.avro.io.DecoderFactory;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FSDataInputStream;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.spark.SparkEnv;
import org.apache.spark.deploy.SparkHadoopUtil;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.api.java.UDF1;

/**
 * An Avro object container file checked block by block, before Spark's Avro source reads it: the
 * records it holds up to its first damage, and where and what that damage is.
 *
 * <p>The header (magic, metadata with the writer's schema and codec, sync marker) is read, then
 * every block: its record count and byte size, its bytes, and the 16-byte sync marker after them,
 * which must be the header's. Each block is also decompressed with its codec and its records
 * skipped with the writer's schema ({@link GenericDatumReader#skip}: no objects built), which must
 * use up exactly the block's bytes: damage inside a block (a flipped byte in deflate or snappy
 * data, a cut varint) is found here rather than failing Spark's read. The first block that fails
 * ends the check: records after it cannot be given exact positions.
 *
 * <p>Only damage is reported; an I/O failure of the file system (a missing file, a network
 * error) is thrown, since quarantining the file would lose it for good. A file cut short is
 * damage (its last block ends early). Runs as a SQL function, on the executors (one call a file),
 * in-process and for a Spark Connect client alike.
 *
 * <p>Returns {@code (problem, at, raw, records, schema)}: the damage (null for a sound file), the
 * byte offset where the damaged part starts, up to 64 of its bytes in hex, the records of the
 * sound blocks before it (all of them for a sound file), and the writer's schema as JSON (null
 * when the header itself is unreadable).
 */
public final class AvroBlocks implements UDF1<String, Row> {
  private static final byte[] MAGIC = {'O', 'b', 'j', 1};
  private static final int SYNC_SIZE = 16;
  private static final int RAW_BYTES = 64;

  @Override
  public Row call(String path) throws IOException {
    Configuration conf = SparkHadoopUtil.get().newConfiguration(SparkEnv.get().conf());
    Object[] found = check(conf, path);
    return RowFactory.create(found);
  }

  /** {@code [problem or null, at, raw hex or null, records, schema JSON or null]}. */
  public static Object[] check(Configuration conf, String path) throws IOException {
    Path file = new Path(path);
    FileSystem fs = file.getFileSystem(conf);
    long length = fs.getFileStatus(file).getLen();
    try (FSDataInputStream in = fs.open(file)) {
      Counting counted = new Counting(new java.io.BufferedInputStream(in, 1 << 20));
      BinaryDecoder decoder = DecoderFactory.get().directBinaryDecoder(counted, null);
      // ---- header ----
      Schema schema;
      String codecName;
      byte[] sync = new byte[SYNC_SIZE];
      try {
        byte[] magic = new byte[MAGIC.length];
        decoder.readFixed(magic);
        if (!Arrays.equals(magic, MAGIC)) {
          return damage(in, length, 0, 0, null, "not an Avro object container file (no Obj\\x01 magic)");
        }
        Map<String, byte[]> meta = new HashMap<>();
        for (long n = decoder.readMapStart(); n != 0; n = decoder.mapNext()) {
          for (long i = 0; i < n; i++) {
            String key = decoder.readString();
            ByteBuffer value = decoder.readBytes(null);
            byte[] bytes = new byte[value.remaining()];
            value.get(bytes);
            meta.put(key, bytes);
          }
        }
        decoder.readFixed(sync);
        byte[] schemaJson = meta.get("avro.schema");
        if (schemaJson == null) {
          return damage(in, length, 0, 0, null, "Avro header without a schema");
        }
        schema = new Schema.Parser().parse(new String(schemaJson, StandardCharsets.UTF_8));
        byte[] codec = meta.get("avro.codec");
        codecName = codec == null ? "null" : new String(codec, StandardCharsets.UTF_8);
      } catch (EOFException error) {
        return damage(in, length, 0, 0, null, "the file ends inside its Avro header");
      } catch (RuntimeException | IOException error) {
        if (error instanceof IOException && !isDecodeError(error)) {
          throw (IOException) error;  // the file system's failure, not the file's
        }
        return damage(in, length, 0, 0, null, "unreadable Avro header: " + error);
      }
      String schemaText = schema.toString();
      org.apache.avro.file.Codec codec;
      try {
        codec = codec(codecName);
      } catch (ReflectiveOperationException | RuntimeException error) {
        return damage(in, length, counted.position, 0, schemaText,
            "unsupported Avro codec '" + codecName + "': " + error.getMessage());
      }
      // ---- blocks ----
      long records = 0;
      long block = 0;
      byte[] marker = new byte[SYNC_SIZE];
      while (counted.position < length) {
        long start = counted.position;
        long count;
        long size;
        byte[] data;
        try {
          count = decoder.readLong();
          size = decoder.readLong();
          if (count >= 0 && size >= 0 && size + SYNC_SIZE > length - counted.position) {
            return damage(in, length, start, records, schemaText, blockText(block, start)
                + " is cut short: it declares " + count + " records in " + size
                + " bytes and a sync marker, the file ends " + (length - counted.position)
                + " bytes after its header");
          }
          if (count < 0 || size < 0 || size > Integer.MAX_VALUE - SYNC_SIZE) {
            return damage(in, length, start, records, schemaText, blockText(block, start)
                + " declares " + count + " records in " + size + " bytes, which the file ("
                + length + " bytes) cannot hold");
          }
          data = new byte[(int) size];
          decoder.readFixed(data);
          decoder.readFixed(marker);
        } catch (EOFException error) {
          return damage(in, length, start, records, schemaText,
              blockText(block, start) + " is cut short: the file ends inside it");
        } catch (RuntimeException | IOException error) {
          if (error instanceof IOException && !isDecodeError(error)) {
            throw (IOException) error;
          }
          return damage(in, length, start, records, schemaText,
              blockText(block, start) + " has an unreadable header: " + error);
        }
        if (!Arrays.equals(marker, sync)) {
          return damage(in, length, start, records, schemaText,
              blockText(block, start) + " is not followed by the file's sync marker");
        }
        try {
          ByteBuffer plain = codec.decompress(ByteBuffer.wrap(data));
          BinaryDecoder values = DecoderFactory.get().binaryDecoder(
              plain.array(), plain.arrayOffset() + plain.position(), plain.remaining(), null);
          for (long i = 0; i < count; i++) {
            GenericDatumReader.skip(schema, values);
          }
          if (!values.isEnd()) {
            return damage(in, length, start, records, schemaText, blockText(block, start)
                + " holds more bytes than its " + count + " records");
          }
        } catch (Exception error) {  // decoding bytes in memory: any failure is damage
          return damage(in, length, start, records, schemaText, blockText(block, start)
              + " does not decode (" + codecName + " codec): " + error);
        }
        records += count;
        block += 1;
      }
      return new Object[] {null, length, null, records, schemaText};
    }
  }

  /** The codec by its container name; Avro keeps {@code createInstance} protected (DataFileStream's). */
  private static org.apache.avro.file.Codec codec(String name) throws ReflectiveOperationException {
    java.lang.reflect.Method create = CodecFactory.class.getDeclaredMethod("createInstance");
    create.setAccessible(true);
    return (org.apache.avro.file.Codec) create.invoke(CodecFactory.fromString(name));
  }

  private static boolean isDecodeError(Throwable error) {
    String kind = error.getClass().getName();
    return kind.startsWith("org.apache.avro") || kind.startsWith("com.fasterxml.jackson");
  }

  private static String blockText(long block, long start) {
    return "Avro block " + (block + 1) + " (at byte " + start + ")";
  }

  private static Object[] damage(
      FSDataInputStream in, long length, long at, long records, String schema, String what)
      throws IOException {
    int take = (int) Math.max(0, Math.min(RAW_BYTES, length - at));
    byte[] raw = new byte[take];
    in.readFully(at, raw, 0, take);
    StringBuilder hex = new StringBuilder(take * 2);
    for (byte b : raw) {
      hex.append(Character.forDigit((b >> 4) & 0xf, 16)).append(Character.forDigit(b & 0xf, 16));
    }
    String problem = what + "; the " + records + " records before it were read, the rest of the file ("
        + (length - at) + " of " + length + " bytes, from byte " + at + ") was not";
    return new Object[] {problem, at, hex.toString(), records, schema};
  }

  /** An input stream that knows how many bytes were read through it. */
  private static final class Counting extends FilterInputStream {
    long position;

    Counting(InputStream in) {
      super(in);
    }

    @Override
    public int read() throws IOException {
      int b = super.read();
      if (b >= 0) {
        position += 1;
      }
      return b;
    }

    @Override
    public int read(byte[] buffer, int offset, int length) throws IOException {
      int n = super.read(buffer, offset, length);
      if (n > 0) {
        position += n;
      }
      return n;
    }

    @Override
    public long skip(long n) throws IOException {
      long skipped = super.skip(n);
      position += skipped;
      return skipped;
    }
  }
}
