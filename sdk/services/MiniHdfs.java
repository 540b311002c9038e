// A single-process HDFS for the eosink test harness: one NameNode and two DataNodes (MiniDFSCluster).
//
// Usage: java -cp <this class, jar or dir>:<hadoop jars>/* MiniHdfs <base dir> <namenode rpc port> <namenode http port> [keep]
//
// Without "keep", the base dir's name and data directories are formatted (emptied). With "keep", the
// cluster starts on what an earlier run left there (the NameNode replays its edit log, the DataNodes
// report their blocks, and the NameNode leaves safe mode once they have): a restart, also after SIGKILL.
// A restart passes the ports the first start bound, so clients and proxies in front of them keep working.
//
// A port of 0 lets the kernel pick one; the READY line names the ports actually bound:
//   READY rpc=127.0.0.1:<port> http=127.0.0.1:<port>
// Every listener (NameNode RPC and HTTP, DataNode transfer, HTTP and IPC) is bound to 127.0.0.1.
// WebHDFS is on. Permission checking is on: the user who runs this JVM is HDFS's superuser (so a client
// of the same login may write anywhere), any other user needs permissions; /tmp is world-writable (1777).
// The process runs until SIGTERM (or SIGINT), which stops the cluster cleanly and exits with status 0,
// leaving the data in place.
// A start that fails (a NameNode port another process took, say) prints its error and halts with status 1,
// leaving the data as a crash would (MiniDFSCluster's own clean-up of a failed build deletes the base dir at exit).
//
// With -Dminihdfs.quickDataNodeExpiry=true (the private test cluster), DataNodes heartbeat every second and
// the NameNode checks every second: a DataNode silent for 12 s is dead (HDFS's defaults: 10.5 min), and the
// NameNode's heartbeat monitor (every 5 s) then stops placing blocks on it. Without it, HDFS's defaults.
//
// Control: commands on standard input, one a line, each answered on standard output (the harness's log)
// with one line once done. The index is a DataNode's place at the first start (0 or 1), whatever was
// stopped or restarted since. Standard input at its end (e.g. /dev/null) only ends the reading.
//   stop-datanode <i>    DataNode i stops at once, like a crash: its connections drop, the NameNode
//                        is not told (it finds out from the missing heartbeats)
//                        -> DATANODE <i> STOPPED
//   start-datanode <i>   DataNode i starts again on its data (new ports); answered once the NameNode
//                        has it registered and has its block report
//                        -> DATANODE <i> STARTED
//   anything that fails  -> CONTROL-ERROR <the command>: <why>

import java.io.BufferedReader;
import java.io.File;
import java.io.IOException;
import java.io.InputStreamReader;
import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.permission.FsPermission;
import org.apache.hadoop.hdfs.HdfsConfiguration;
import org.apache.hadoop.hdfs.MiniDFSCluster;
import org.apache.hadoop.hdfs.MiniDFSCluster.DataNodeProperties;
import org.apache.hadoop.hdfs.server.datanode.DataNode;
import org.apache.hadoop.util.ShutdownHookManager;
import org.apache.log4j.PropertyConfigurator;
import sun.misc.Signal;

public final class MiniHdfs {
    /** Runs before Hadoop's own hooks (the FileSystem cache closes at priority 10). */
    private static final int HOOK_PRIORITY = 100;
    private static final AtomicBoolean STOPPING = new AtomicBoolean();
    private static final int DATANODES = 2;
    /** How long start-datanode waits for the NameNode to have the DataNode's block report. */
    private static final int BLOCK_REPORT_WAIT_MS = 60_000;

    private MiniHdfs() {}

    public static void main(String[] args) throws Exception {
        boolean keep = args.length == 4 && args[3].equals("keep");
        if (args.length != 3 && !keep) {
            System.err.println("usage: MiniHdfs <base dir> <namenode rpc port> <namenode http port> [keep]");
            System.exit(2);
        }
        configureLogging();
        File base = new File(args[0]).getAbsoluteFile();
        int rpcPort = Integer.parseInt(args[1]);
        int httpPort = Integer.parseInt(args[2]);

        Configuration conf = new HdfsConfiguration();
        conf.set("hadoop.tmp.dir", new File(base, "tmp").getPath());
        conf.setBoolean("dfs.permissions.enabled", true);
        conf.setBoolean("dfs.webhdfs.enabled", true);
        // Two DataNodes and replication 2, with a file allowed to close while its last block is
        // committed but not yet reported by the DataNodes: the NameNode grants that only when the
        // block has more expected replicas than the minimum (1). With one DataNode, a client's close()
        // races the DataNode's block report, loses about half the time and waits 400-500 ms to retry.
        // Until the report, the NameNode counts that block as 0 bytes for readers: eosink's reads
        // check the length (eosink/stores/hdfs.py), so the tests see what such clusters do.
        // -Dminihdfs.numCommittedAllowed=0 keeps HDFS's default instead: close() waits for the report, and
        // readers that trust the NameNode's length (delta-rs's hdfs-native) never see a short file.
        conf.setInt("dfs.replication", DATANODES);
        conf.setInt("dfs.namenode.file.close.num-committed-allowed", Integer.getInteger("minihdfs.numCommittedAllowed", 1));
        if (Boolean.getBoolean("minihdfs.quickDataNodeExpiry")) {
            // Heartbeats every second, checked every second: a DataNode silent for 12 s is dead (see the header).
            conf.setLong("dfs.heartbeat.interval", 1);
            conf.setInt("dfs.namenode.heartbeat.recheck-interval", 1_000);
        }
        // Loopback only: the builder keeps these because of checkDataNodeAddrConfig(true).
        conf.set("dfs.datanode.address", "127.0.0.1:0");
        conf.set("dfs.datanode.http.address", "127.0.0.1:0");
        conf.set("dfs.datanode.https.address", "127.0.0.1:0");
        conf.set("dfs.datanode.ipc.address", "127.0.0.1:0");
        conf.set("dfs.namenode.https-address", "127.0.0.1:0");

        MiniDFSCluster cluster;
        try {
            cluster = start(conf, base, rpcPort, httpPort, keep);
        } catch (Throwable t) {
            // A cluster that fails to build shuts itself down, which marks the whole base dir for deletion at exit:
            // halt instead, as a crash would, so that a failed restart (a NameNode port another process took
            // meanwhile, say) leaves the data for the next one. The harness reads the error from the log.
            t.printStackTrace();
            System.err.flush();
            System.out.flush();
            Runtime.getRuntime().halt(1);
            return;
        }

        InetSocketAddress rpc = cluster.getNameNode().getNameNodeAddress();
        InetSocketAddress http = cluster.getNameNode().getHttpAddress();
        Control control = new Control(cluster);
        System.out.println("READY rpc=127.0.0.1:" + rpc.getPort() + " http=127.0.0.1:" + http.getPort());
        System.out.flush();
        control.run(); // until standard input ends
        Thread.currentThread().join();
    }

    /**
     * Builds the cluster on {@code base} (formatted, or with {@code keep} as an earlier run left it), stops it on
     * SIGTERM and SIGINT, and returns once the NameNode and the DataNodes are up and {@code /tmp} is world-writable.
     */
    private static MiniDFSCluster start(Configuration conf, File base, int rpcPort, int httpPort, boolean keep)
            throws IOException {
        MiniDFSCluster cluster = new MiniDFSCluster.Builder(conf, base)
                .nameNodePort(rpcPort)
                .nameNodeHttpPort(httpPort)
                .numDataNodes(DATANODES)
                .storagesPerDatanode(1)
                .checkDataNodeAddrConfig(true)
                .format(!keep)
                .manageNameDfsDirs(true) // base/name-0-*: the same directories at every start
                .manageDataDfsDirs(true) // base/data/data<n>: the same per DataNode at every start
                .build();
        // SIGTERM/SIGINT stop the cluster *before* the JVM begins its shutdown: stopping inside a
        // shutdown hook makes the DataNode's threads fail (they may not unregister their own hooks).
        // The hook remains for any other way the JVM exits.
        Signal.handle(new Signal("TERM"), sig -> exit(cluster));
        Signal.handle(new Signal("INT"), sig -> exit(cluster));
        ShutdownHookManager.get().addShutdownHook(() -> shutdown(cluster), HOOK_PRIORITY, 25, TimeUnit.SECONDS);
        cluster.waitActive();
        cluster.waitClusterUp();
        FileSystem fs = cluster.getFileSystem();
        fs.mkdirs(new Path("/tmp"));
        fs.setPermission(new Path("/tmp"), new FsPermission((short) 01777));
        return cluster;
    }

    /** The commands on standard input (see the header): stop and start single DataNodes. */
    private static final class Control {
        private final MiniDFSCluster cluster;
        /** Each DataNode by its index at the first start: the running one, or null while stopped. */
        private final DataNode[] running = new DataNode[DATANODES];
        /** What a stopped DataNode needs to start again, by the same index. */
        private final DataNodeProperties[] stopped = new DataNodeProperties[DATANODES];

        Control(MiniDFSCluster cluster) {
            this.cluster = cluster;
            List<DataNode> started = cluster.getDataNodes();
            for (int i = 0; i < DATANODES; i++) {
                running[i] = started.get(i);
            }
        }

        /** Answer commands until standard input ends (or cannot be read: the cluster runs on regardless). */
        void run() {
            BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
            try {
                for (String line = in.readLine(); line != null; line = in.readLine()) {
                    answer(line.trim());
                }
            } catch (IOException e) {
                System.out.println("CONTROL-CLOSED " + e);
                System.out.flush();
            }
        }

        private void answer(String command) {
            if (command.isEmpty()) {
                return;
            }
            String answer;
            try {
                answer = execute(command);
            } catch (Exception e) {
                answer = "CONTROL-ERROR " + command + ": " + e;
            }
            System.out.println(answer.replace('\n', ' '));
            System.out.flush();
        }

        private String execute(String command) throws Exception {
            String[] words = command.split("\\s+");
            if (words.length != 2) {
                throw new IllegalArgumentException("expected stop-datanode <i> or start-datanode <i>");
            }
            int index = Integer.parseInt(words[1]);
            if (index < 0 || index >= DATANODES) {
                throw new IllegalArgumentException("no DataNode " + index + " (there are " + DATANODES + ")");
            }
            switch (words[0]) {
                case "stop-datanode":
                    stop(index);
                    return "DATANODE " + index + " STOPPED";
                case "start-datanode":
                    start(index);
                    return "DATANODE " + index + " STARTED";
                default:
                    throw new IllegalArgumentException("unknown command " + words[0]);
            }
        }

        /** Shut the DataNode down in place; the NameNode learns of it only from its missing heartbeats. */
        private void stop(int index) {
            DataNode node = running[index];
            if (node == null) {
                throw new IllegalStateException("DataNode " + index + " is stopped already");
            }
            int at = cluster.getDataNodes().indexOf(node); // the cluster's own list shifts as nodes stop and start
            stopped[index] = cluster.stopDataNode(at);
            running[index] = null;
        }

        /** Start the DataNode on its storage again; return once the NameNode has its block report. */
        private void start(int index) throws Exception {
            DataNodeProperties props = stopped[index];
            if (props == null) {
                throw new IllegalStateException("DataNode " + index + " is running");
            }
            if (!cluster.restartDataNode(props, false)) {
                throw new IllegalStateException("MiniDFSCluster did not restart DataNode " + index);
            }
            List<DataNode> nodes = cluster.getDataNodes();
            running[index] = nodes.get(nodes.size() - 1); // a restarted DataNode joins the end of the list
            stopped[index] = null;
            cluster.waitActive(); // registered with the NameNode (which resets its block report count)
            cluster.waitFirstBRCompleted(0, BLOCK_REPORT_WAIT_MS);
        }
    }

    /**
     * Stops the cluster and halts the JVM. MiniDFSCluster.shutdown() marks its whole base dir delete-on-exit;
     * halting skips that hook (and the others, which the stopped cluster no longer needs), so a stopped
     * cluster's data stays for a restart with "keep". The harness removes a service's data at its next start.
     */
    private static void exit(MiniDFSCluster cluster) {
        shutdown(cluster);
        Runtime.getRuntime().halt(0);
    }

    /** Stops the cluster once; later calls return at once. */
    private static void shutdown(MiniDFSCluster cluster) {
        if (!STOPPING.compareAndSet(false, true)) {
            return;
        }
        System.out.println("STOPPING");
        System.out.flush();
        try {
            cluster.shutdown();
        } catch (Throwable t) {
            t.printStackTrace(System.out);
        }
        System.out.println("STOPPED");
        System.out.flush();
    }

    /** Warnings only, plus the cluster's own start and stop messages, on stdout (the harness's log). */
    private static void configureLogging() {
        Properties p = new Properties();
        p.setProperty("log4j.rootLogger", "WARN, out");
        p.setProperty("log4j.appender.out", "org.apache.log4j.ConsoleAppender");
        p.setProperty("log4j.appender.out.Target", "System.out");
        p.setProperty("log4j.appender.out.layout", "org.apache.log4j.PatternLayout");
        p.setProperty("log4j.appender.out.layout.ConversionPattern", "%d{ISO8601} %-5p [%t] %c{1}: %m%n");
        p.setProperty("log4j.logger.org.apache.hadoop.hdfs.MiniDFSCluster", "INFO");
        // Routine warnings of a throw-away test cluster: no native library, no HTTP signature secret
        // file, no CSRF filter, the directory scanner's throttle default.
        for (String quiet : new String[] {
                "org.apache.hadoop.util.NativeCodeLoader",
                "org.apache.hadoop.security.authentication.server.AuthenticationFilter",
                "org.apache.hadoop.hdfs.server.datanode.web.DatanodeHttpServer",
                "org.apache.hadoop.hdfs.server.datanode.DirectoryScanner"}) {
            p.setProperty("log4j.logger." + quiet, "ERROR");
        }
        PropertyConfigurator.configure(p);
    }
}
