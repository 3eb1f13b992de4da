package replay.bench;

import com.fasterxml.jackson.core.JsonFactory;
import com.fasterxml.jackson.core.JsonParser;
import com.fasterxml.jackson.core.JsonToken;

import java.io.BufferedWriter;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.time.Duration;
import java.util.HashMap;
import java.util.HashSet;

import org.apache.flink.api.common.JobExecutionResult;
import org.apache.flink.api.common.accumulators.LongCounter;
import org.apache.flink.api.common.eventtime.Watermark;
import org.apache.flink.api.common.eventtime.WatermarkGenerator;
import org.apache.flink.api.common.eventtime.WatermarkOutput;
import org.apache.flink.api.common.eventtime.WatermarkStrategy;
import org.apache.flink.api.common.functions.AggregateFunction;
import org.apache.flink.api.common.functions.OpenContext;
import org.apache.flink.api.common.functions.RichFlatMapFunction;
import org.apache.flink.api.connector.sink2.Sink;
import org.apache.flink.api.connector.sink2.SinkWriter;
import org.apache.flink.api.connector.sink2.WriterInitContext;
import org.apache.flink.connector.file.src.FileSource;
import org.apache.flink.connector.file.src.reader.TextLineInputFormat;
import org.apache.flink.streaming.api.datastream.KeyedStream;
import org.apache.flink.streaming.api.datastream.SingleOutputStreamOperator;
import org.apache.flink.streaming.api.datastream.WindowedStream;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.streaming.api.functions.windowing.ProcessWindowFunction;
import org.apache.flink.streaming.api.windowing.assigners.EventTimeSessionWindows;
import org.apache.flink.streaming.api.windowing.assigners.SlidingEventTimeWindows;
import org.apache.flink.streaming.api.windowing.assigners.TumblingEventTimeWindows;
import org.apache.flink.streaming.api.windowing.triggers.ContinuousEventTimeTrigger;
import org.apache.flink.streaming.api.windowing.windows.TimeWindow;
import org.apache.flink.util.Collector;
import org.apache.flink.util.OutputTag;

/**
 * A benchmark scenario as a Flink DataStream job, on Flink's own {@code WindowOperator}: tumbling,
 * sliding or session (merging) event-time windows with Flink's event-time or continuous
 * event-time trigger, allowed lateness, late records to a side output, and count, sum(value) and
 * a distinct count kept incrementally per window. The watermark is the replay's (see {@link
 * PartitionWatermarks}). The input is read by one source reader in file order (one file in replay
 * order keeps the replay's record order), parsed and watermarked in that one task; the windows
 * run with the given parallelism.
 *
 * <p>Arguments (bench.harness derives the scenario's from its pipeline config, so that the two
 * cannot drift apart): input path, output directory, window parallelism, window
 * ({@code tumbling:SIZE}, {@code sliding:SIZE:SLIDE} or {@code session:GAP}), trigger ({@code
 * event_time} or {@code continuous:INTERVAL}), allowed lateness, out-of-orderness, idle timeout
 * (all milliseconds), key field, distinct-counted field. Writes panes.csv-N (key, window start and
 * end, count, sum, distinct count) and late.csv-N (key, ts, the distinct field), one per subtask,
 * and result.json (wall time, counts) to the output directory.
 */
public final class FlinkReference {
    private FlinkReference() {}

    /** One accepted click. Public fields and a no-arg constructor: a Flink POJO. */
    public static final class Click {
        public long ts;
        public long ingestTs;
        public int partition;
        /** The key field's value (a string, or null when absent or not a string). */
        public String key;
        /** The distinct-counted field's value, likewise. */
        public String distinct;
        public double value;
    }

    public static void main(String[] args) throws Exception {
        String input = args[0];
        Path out = Paths.get(args[1]);
        int parallelism = Integer.parseInt(args[2]);
        String[] window = args[3].split(":");
        String[] trigger = args[4].split(":");
        Duration lateness = Duration.ofMillis(Long.parseLong(args[5]));
        long outOfOrderness = Long.parseLong(args[6]);
        long idleTimeout = Long.parseLong(args[7]);
        String keyField = args[8];
        String distinctField = args[9];
        Files.createDirectories(out);

        StreamExecutionEnvironment env = StreamExecutionEnvironment.getExecutionEnvironment();
        env.setParallelism(parallelism);
        env.getConfig().setAutoWatermarkInterval(0); // watermarks come from onEvent, per record

        FileSource<String> source =
                FileSource.forRecordStreamFormat(new TextLineInputFormat(), new org.apache.flink.core.fs.Path(input))
                        .build();
        OutputTag<Click> lateTag = new OutputTag<>("late") {};
        SingleOutputStreamOperator<Click> clicks = env
                .fromSource(source, WatermarkStrategy.noWatermarks(), "archive")
                .setParallelism(1)
                .flatMap(new ParseClicks(keyField, distinctField))
                .setParallelism(1)
                .assignTimestampsAndWatermarks(WatermarkStrategy.<Click>forGenerator(
                        ctx -> new PartitionWatermarks(outOfOrderness, idleTimeout))
                        .withTimestampAssigner((click, previous) -> click.ts))
                .setParallelism(1);
        KeyedStream<Click, String> keyed = clicks.keyBy(click -> click.key);
        WindowedStream<Click, String, TimeWindow> windowed = switch (window[0]) {
            case "tumbling" -> keyed.window(TumblingEventTimeWindows.of(millis(window[1])));
            case "sliding" -> keyed.window(SlidingEventTimeWindows.of(millis(window[1]), millis(window[2])));
            case "session" -> keyed.window(EventTimeSessionWindows.withGap(millis(window[1])));
            default -> throw new IllegalArgumentException("unknown window: " + args[3]);
        };
        windowed = switch (trigger[0]) {
            case "event_time" -> windowed; // the event-time assigners' default trigger
            case "continuous" -> windowed.trigger(ContinuousEventTimeTrigger.of(millis(trigger[1])));
            default -> throw new IllegalArgumentException("unknown trigger: " + args[4]);
        };
        SingleOutputStreamOperator<String> panes = windowed
                .allowedLateness(lateness)
                .sideOutputLateData(lateTag)
                .aggregate(new ClickAggregate(), new PaneRow());
        panes.sinkTo(new CsvFiles(out.resolve("panes.csv").toString()));
        panes.getSideOutput(lateTag)
                .map(click -> click.key + "," + click.ts + "," + click.distinct)
                .sinkTo(new CsvFiles(out.resolve("late.csv").toString()));

        long started = System.nanoTime();
        JobExecutionResult result = env.execute("flink-reference");
        double wall = (System.nanoTime() - started) / 1e9;
        Long records = result.getAccumulatorResult("records");
        Long rejected = result.getAccumulatorResult("rejected");
        String json = String.format(
                "{\"wall_seconds\": %.3f, \"records\": %d, \"rejected\": %d, \"flink_version\": \"%s\"}%n",
                wall, records, rejected, org.apache.flink.runtime.util.EnvironmentInformation.getVersion());
        Files.writeString(out.resolve("result.json"), json);
    }

    private static Duration millis(String value) {
        return Duration.ofMillis(Long.parseLong(value));
    }

    /**
     * JSON line -> Click. A line that is not one JSON object with integer ts, ingest_ts, partition
     * and offset, string event_id and key field, and a numeric (or absent, or null) value is
     * counted and dropped, as the replay quarantines it; the distinct-counted field may be absent
     * (count distinct skips it).
     */
    static final class ParseClicks extends RichFlatMapFunction<String, Click> {
        private final String keyField;
        private final String distinctField;
        private transient JsonFactory json;
        private final LongCounter records = new LongCounter();
        private final LongCounter rejected = new LongCounter();

        ParseClicks(String keyField, String distinctField) {
            this.keyField = keyField;
            this.distinctField = distinctField;
        }

        @Override
        public void open(OpenContext context) {
            json = new JsonFactory();
            getRuntimeContext().addAccumulator("records", records);
            getRuntimeContext().addAccumulator("rejected", rejected);
        }

        @Override
        public void flatMap(String line, Collector<Click> out) {
            if (line.isBlank()) {
                return;
            }
            Click click = new Click();
            boolean hasTs = false;
            boolean hasIngestTs = false;
            boolean hasPartition = false;
            boolean hasOffset = false;
            boolean hasId = false;
            boolean badValue = false;
            try (JsonParser parser = json.createParser(line)) {
                if (parser.nextToken() != JsonToken.START_OBJECT) {
                    rejected.add(1);
                    return;
                }
                while (parser.nextToken() == JsonToken.FIELD_NAME) {
                    String field = parser.currentName();
                    JsonToken token = parser.nextToken();
                    switch (field) {
                        case "ts" -> {
                            hasTs = token == JsonToken.VALUE_NUMBER_INT;
                            click.ts = hasTs ? parser.getLongValue() : 0;
                        }
                        case "ingest_ts" -> {
                            hasIngestTs = token == JsonToken.VALUE_NUMBER_INT;
                            click.ingestTs = hasIngestTs ? parser.getLongValue() : 0;
                        }
                        case "partition" -> {
                            hasPartition = token == JsonToken.VALUE_NUMBER_INT;
                            click.partition = hasPartition ? parser.getIntValue() : 0;
                        }
                        case "offset" -> hasOffset = token == JsonToken.VALUE_NUMBER_INT;
                        case "event_id" -> hasId = token == JsonToken.VALUE_STRING;
                        case "value" -> {
                            badValue = !token.isNumeric() && token != JsonToken.VALUE_NULL;
                            click.value = token.isNumeric() ? parser.getDoubleValue() : 0.0;
                        }
                        default -> {
                            String text = token == JsonToken.VALUE_STRING ? parser.getText() : null;
                            if (field.equals(keyField)) {
                                click.key = text;
                            } else if (field.equals(distinctField)) {
                                click.distinct = text;
                            }
                            parser.skipChildren();
                        }
                    }
                }
                if (parser.nextToken() != null) { // trailing content after the object
                    rejected.add(1);
                    return;
                }
            } catch (IOException malformed) {
                rejected.add(1);
                return;
            }
            if (!(hasTs && hasIngestTs && hasPartition && hasOffset && hasId) || badValue
                    || click.key == null) {
                rejected.add(1);
                return;
            }
            records.add(1);
            out.collect(click);
        }
    }

    /**
     * The replay's watermark, as a Flink source with per-partition watermarks would make it: each
     * archive partition's own bounded out-of-orderness watermark (max timestamp - delay - 1), the
     * minimum over partitions not idle (silent for less than the idle timeout of replay clock,
     * i.e. ingest time), emitted after every record whenever it advances.
     */
    static final class PartitionWatermarks implements WatermarkGenerator<Click> {
        private final HashMap<Integer, long[]> partitions = new HashMap<>(); // {max timestamp, last clock}
        private long emitted = Long.MIN_VALUE;
        private final long outOfOrderness;
        private final long idleTimeout;

        PartitionWatermarks(long outOfOrderness, long idleTimeout) {
            this.outOfOrderness = outOfOrderness;
            this.idleTimeout = idleTimeout;
        }

        @Override
        public void onEvent(Click click, long timestamp, WatermarkOutput output) {
            long[] own = partitions.computeIfAbsent(click.partition, p -> new long[] {Long.MIN_VALUE, Long.MIN_VALUE});
            own[0] = Math.max(own[0], timestamp);
            own[1] = Math.max(own[1], click.ingestTs);
            long combined = Long.MAX_VALUE;
            for (long[] partition : partitions.values()) {
                if (click.ingestTs - partition[1] < idleTimeout) {
                    combined = Math.min(combined, partition[0] - outOfOrderness - 1);
                }
            }
            if (combined > emitted) {
                emitted = combined;
                output.emitWatermark(new Watermark(combined));
            }
        }

        @Override
        public void onPeriodicEmit(WatermarkOutput output) {}
    }

    /** count(*), sum(value) and a distinct count, kept incrementally per window. */
    public static final class Totals {
        public long clicks;
        public double revenue;
        public HashSet<String> distinct = new HashSet<>();
    }

    static final class ClickAggregate implements AggregateFunction<Click, Totals, Totals> {
        @Override
        public Totals createAccumulator() {
            return new Totals();
        }

        @Override
        public Totals add(Click click, Totals totals) {
            totals.clicks++;
            totals.revenue += click.value;
            if (click.distinct != null) {
                totals.distinct.add(click.distinct);
            }
            return totals;
        }

        @Override
        public Totals getResult(Totals totals) {
            return totals;
        }

        @Override
        public Totals merge(Totals a, Totals b) {
            a.clicks += b.clicks;
            a.revenue += b.revenue;
            a.distinct.addAll(b.distinct);
            return a;
        }
    }

    /**
     * One CSV row per pane: key, window start and end, count, sum, distinct count. (Flink does not
     * tell a window function which timer fired, so panes carry no EARLY/ON_TIME/LATE label.)
     */
    static final class PaneRow extends ProcessWindowFunction<Totals, String, String, TimeWindow> {
        @Override
        public void process(String key, Context context, Iterable<Totals> totals, Collector<String> out) {
            Totals t = totals.iterator().next();
            out.collect(key + "," + context.window().getStart() + "," + context.window().getEnd() + ","
                    + t.clicks + "," + t.revenue + "," + t.distinct.size());
        }
    }

    /** Rows to one local file per subtask: the benchmark's output, without checkpoint-bound commits. */
    static final class CsvFiles implements Sink<String> {
        private final String prefix;

        CsvFiles(String prefix) {
            this.prefix = prefix;
        }

        @Override
        public SinkWriter<String> createWriter(WriterInitContext context) throws IOException {
            Path file = Paths.get(prefix + "-" + context.getTaskInfo().getIndexOfThisSubtask());
            BufferedWriter writer = Files.newBufferedWriter(file, StandardCharsets.UTF_8);
            return new SinkWriter<>() {
                @Override
                public void write(String row, Context context) throws IOException {
                    writer.write(row);
                    writer.newLine();
                }

                @Override
                public void flush(boolean endOfInput) throws IOException {
                    writer.flush();
                }

                @Override
                public void close() throws IOException {
                    writer.close();
                }
            };
        }
    }
}
