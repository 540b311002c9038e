// An HA HDFS in one JVM for the eosink test harness: name service ns1 with two NameNodes (nn0, nn1) sharing
// their edit log through three JournalNodes (quorum journal), and two DataNodes that report to both.
//
// Usage: java -cp <this class, jar or dir>:<hadoop jars>/* MiniHdfsHa <base dir>
//            <nn0 rpc port> <nn0 http port> <nn1 rpc port> <nn1 http port> <active index> [keep]
//
// Why not Hadoop's MiniQJMHACluster: it picks the NameNode ports itself (random, retried on a clash) and always
// formats, so neither a fault proxy in front of a NameNode nor a restart on the same data would work. This repeats
// its steps with the ports the harness chose.
//
// Without "keep", the base dir is formatted: JournalNodes (base/jn), NameNodes (base/name-*) and DataNodes
// (base/data); then, as MiniQJMHACluster does, the NameNodes are stopped once, the shared edits are initialised
// from nn0 and both start again. With "keep", everything starts on what an earlier run left (a restart, also after
// SIGKILL). The JournalNodes' ports are the kernel's pick at every start (only the NameNodes, in this JVM, use them).
//
// Both NameNodes start as standby; then NameNode <active index> is made active (no ZKFC: automatic failover is
// off, every transition is a command below), and /tmp is made world-writable. The line
//   READY ns=ns1 nn0=127.0.0.1:<rpc>/<http> nn1=127.0.0.1:<rpc>/<http> active=<i>
// says the cluster is up. Every listener is bound to 127.0.0.1. The retry cache is on, the standby tails the
// shared edits every second. Permissions, replication 2, num-committed-allowed and the system properties
// minihdfs.quickDataNodeExpiry / minihdfs.numCommittedAllowed are as in MiniHdfs.java. SIGTERM (or SIGINT)
// stops the cluster and exits with status 0, leaving the data; a failed start halts with status 1.
//
// Control: commands on standard input, one a line, each answered on standard output with one line once done.
// NameNode and DataNode indexes are places at the first start (0 or 1), whatever was stopped or restarted since.
//   failover <from> <to>  NameNode <from> becomes standby (if it runs and is active), then <to> becomes active
//                         (catching up on the shared edits), answered once <to> is out of safe mode
//                         -> ACTIVE <to>
//   stop-namenode <i>     NameNode i stops (its RPC and HTTP ports close; an in-JVM stop, not a SIGKILL)
//                         -> NAMENODE <i> STOPPED
//   start-namenode <i>    NameNode i starts again on its ports and data, as a standby; answered once the
//                         DataNodes have registered with it and sent it their block reports
//                         -> NAMENODE <i> STARTED
//   state                 -> STATE nn0=<active|standby|stopped|...> nn1=<...>
//   stop-datanode <i>     as MiniHdfs.java -> DATANODE <i> STOPPED
//   start-datanode <i>    as MiniHdfs.java, answered once every running NameNode has its block report
//                         -> DATANODE <i> STARTED
//   anything that fails   -> CONTROL-ERROR <the command>: <why>

import java.io.BufferedReader;
import java.io.File;
import java.io.IOException;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.atomic.AtomicBoolean;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.permission.FsPermission;
import org.apache.hadoop.hdfs.HdfsConfiguration;
import org.apache.hadoop.hdfs.MiniDFSCluster;
import org.apache.hadoop.hdfs.MiniDFSCluster.DataNodeProperties;
import org.apache.hadoop.hdfs.MiniDFSNNTopology;
import org.apache.hadoop.hdfs.qjournal.MiniJournalCluster;
import org.apache.hadoop.hdfs.server.datanode.DataNode;
import org.apache.hadoop.hdfs.server.namenode.NameNode;
import org.apache.hadoop.util.ShutdownHookManager;
import org.apache.log4j.PropertyConfigurator;
import sun.misc.Signal;

public final class MiniHdfsHa {
    static final String NAMESERVICE = "ns1";
    private static final int NAMENODES = 2;
    private static final int DATANODES = 2;
    private static final int JOURNALNODES = 3;
    /** Runs before Hadoop's own hooks (the FileSystem cache closes at priority 10). */
    private static final int HOOK_PRIORITY = 100;
    /** How long a command waits for block reports, or for a NameNode to leave safe mode. */
    private static final int WAIT_MS = 60_000;
    private static final AtomicBoolean STOPPING = new AtomicBoolean();

    private MiniHdfsHa() {}

    public static void main(String[] args) throws Exception {
        boolean keep = args.length == 7 && args[6].equals("keep");
        if (args.length != 6 && !keep) {
            System.err.println("usage: MiniHdfsHa <base dir> <nn0 rpc> <nn0 http> <nn1 rpc> <nn1 http> <active> [keep]");
            System.exit(2);
        }
        configureLogging();
        File base = new File(args[0]).getAbsoluteFile();
        int[] rpc = {Integer.parseInt(args[1]), Integer.parseInt(args[3])};
        int[] http = {Integer.parseInt(args[2]), Integer.parseInt(args[4])};
        int active = Integer.parseInt(args[5]);
        if (active < 0 || active >= NAMENODES) {
            System.err.println("the active NameNode is 0 or 1, not " + active);
            System.exit(2);
        }

        Cluster cluster;
        try {
            cluster = start(base, rpc, http, active, keep);
        } catch (Throwable t) {
            // As MiniHdfs: a failed build marks the base dir for deletion at exit; halt as a crash would instead.
            t.printStackTrace();
            System.err.flush();
            System.out.flush();
            Runtime.getRuntime().halt(1);
            return;
        }
        System.out.println("READY ns=" + NAMESERVICE
                + " nn0=127.0.0.1:" + rpc[0] + "/" + http[0]
                + " nn1=127.0.0.1:" + rpc[1] + "/" + http[1]
                + " active=" + active);
        System.out.flush();
        new Control(cluster).run(); // until standard input ends
        Thread.currentThread().join();
    }

    /** The JournalNodes and the MiniDFSCluster (NameNodes and DataNodes) on them. */
    static final class Cluster {
        final MiniJournalCluster journal;
        final MiniDFSCluster dfs;

        Cluster(MiniJournalCluster journal, MiniDFSCluster dfs) {
            this.journal = journal;
            this.dfs = dfs;
        }
    }

    private static Configuration configuration(File base) {
        Configuration conf = new HdfsConfiguration();
        conf.set("hadoop.tmp.dir", new File(base, "tmp").getPath());
        conf.setBoolean("dfs.permissions.enabled", true);
        conf.setBoolean("dfs.webhdfs.enabled", true);
        // As MiniHdfs.java (see there): replication 2, a file may close before its last block is reported.
        conf.setInt("dfs.replication", DATANODES);
        conf.setInt("dfs.namenode.file.close.num-committed-allowed", Integer.getInteger("minihdfs.numCommittedAllowed", 1));
        if (Boolean.getBoolean("minihdfs.quickDataNodeExpiry")) {
            conf.setLong("dfs.heartbeat.interval", 1);
            conf.setInt("dfs.namenode.heartbeat.recheck-interval", 1_000);
        }
        // HA without ZKFC: transitions are the harness's commands; the standby tails the shared edits every second
        // (HDFS's default: a minute); the retry cache answers a client's retried call after a failover.
        conf.setBoolean("dfs.ha.automatic-failover.enabled", false);
        conf.set("dfs.ha.tail-edits.period", "1");
        conf.setBoolean("dfs.namenode.enable.retrycache", true);
        // JournalNodes syncing each other's edits need the shared edits URI in their own conf; they are never
        // restarted behind the others here, and without it they log an error at every new journal.
        conf.setBoolean("dfs.journalnode.enable.sync", false);
        conf.set("dfs.client.failover.proxy.provider." + NAMESERVICE,
                "org.apache.hadoop.hdfs.server.namenode.ha.ConfiguredFailoverProxyProvider");
        // Loopback only: the builder keeps these because of checkDataNodeAddrConfig(true).
        conf.set("dfs.datanode.address", "127.0.0.1:0");
        conf.set("dfs.datanode.http.address", "127.0.0.1:0");
        conf.set("dfs.datanode.https.address", "127.0.0.1:0");
        conf.set("dfs.datanode.ipc.address", "127.0.0.1:0");
        conf.set("dfs.namenode.https-address", "127.0.0.1:0");
        conf.set("dfs.journalnode.https-address", "127.0.0.1:0");
        return conf;
    }

    /**
     * Starts the JournalNodes, then the NameNodes and DataNodes (formatted, or with {@code keep} as an earlier run left
     * them), makes NameNode {@code active} active, stops everything on SIGTERM and SIGINT, and returns once the
     * DataNodes are registered and {@code /tmp} is world-writable.
     */
    private static Cluster start(File base, int[] rpc, int[] http, int active, boolean keep) throws Exception {
        Configuration conf = configuration(base);
        MiniJournalCluster journal = new MiniJournalCluster.Builder(conf, new File(base, "jn"))
                .numJournalNodes(JOURNALNODES)
                .format(!keep)
                .build();
        journal.waitActive();
        conf.set("dfs.namenode.shared.edits.dir", journal.getQuorumJournalURI(NAMESERVICE).toString());

        MiniDFSNNTopology.NSConf ns = new MiniDFSNNTopology.NSConf(NAMESERVICE);
        for (int i = 0; i < NAMENODES; i++) {
            ns.addNN(new MiniDFSNNTopology.NNConf("nn" + i).setIpcPort(rpc[i]).setHttpPort(http[i]));
        }
        MiniDFSCluster dfs = new MiniDFSCluster.Builder(conf, base)
                .nnTopology(new MiniDFSNNTopology().addNameservice(ns))
                .manageNameDfsSharedDirs(false) // the shared edits are the JournalNodes'
                .numDataNodes(DATANODES)
                .storagesPerDatanode(1)
                .checkDataNodeAddrConfig(true)
                .checkExitOnShutdown(false) // a fenced NameNode "exits" (an exception, in a MiniDFSCluster)
                .format(!keep)
                .manageNameDfsDirs(true)
                .manageDataDfsDirs(true)
                .build();
        Cluster cluster = new Cluster(journal, dfs);
        Signal.handle(new Signal("TERM"), sig -> exit(cluster));
        Signal.handle(new Signal("INT"), sig -> exit(cluster));
        ShutdownHookManager.get().addShutdownHook(() -> shutdown(cluster), HOOK_PRIORITY, 25, TimeUnit.SECONDS);
        dfs.waitActive();
        if (!keep) {
            // MiniDFSCluster can format a NameNode only by starting it: stop both, put nn0's edits on the
            // JournalNodes, start both again (MiniQJMHACluster's steps).
            dfs.shutdownNameNodes();
            NameNode.initializeSharedEdits(dfs.getConfiguration(0), true);
            dfs.restartNameNodes();
        }
        dfs.transitionToActive(active);
        dfs.waitActive();
        for (int i = 0; i < NAMENODES; i++) {
            dfs.waitFirstBRCompleted(i, WAIT_MS);
        }
        waitOutOfSafeMode(dfs, active);
        FileSystem fs = dfs.getFileSystem(active);
        fs.mkdirs(new Path("/tmp"));
        fs.setPermission(new Path("/tmp"), new FsPermission((short) 01777));
        return cluster;
    }

    private static void waitOutOfSafeMode(MiniDFSCluster dfs, int index) throws Exception {
        long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(WAIT_MS);
        while (true) {
            NameNode nn = dfs.getNameNode(index);
            if (nn == null) {
                throw new IllegalStateException("NameNode " + index + " is stopped");
            }
            if (!nn.isInSafeMode()) {
                return;
            }
            if (System.nanoTime() > deadline) {
                throw new TimeoutException("NameNode " + index + " is still in safe mode after " + WAIT_MS + " ms");
            }
            Thread.sleep(50);
        }
    }

    /** The commands on standard input (see the header). */
    private static final class Control {
        private final MiniDFSCluster dfs;
        /** Each DataNode by its index at the first start: the running one, or null while stopped. */
        private final DataNode[] running = new DataNode[DATANODES];
        /** What a stopped DataNode needs to start again, by the same index. */
        private final DataNodeProperties[] stopped = new DataNodeProperties[DATANODES];

        Control(Cluster cluster) {
            this.dfs = cluster.dfs;
            List<DataNode> started = dfs.getDataNodes();
            for (int i = 0; i < DATANODES; i++) {
                running[i] = started.get(i);
            }
        }

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
            switch (words[0]) {
                case "state":
                    arguments(words, 0);
                    return "STATE nn0=" + state(0) + " nn1=" + state(1);
                case "failover": {
                    arguments(words, 2);
                    int from = index(words[1], NAMENODES, "NameNode");
                    int to = index(words[2], NAMENODES, "NameNode");
                    failover(from, to);
                    return "ACTIVE " + to;
                }
                case "stop-namenode": {
                    arguments(words, 1);
                    int i = index(words[1], NAMENODES, "NameNode");
                    if (dfs.getNameNode(i) == null) {
                        throw new IllegalStateException("NameNode " + i + " is stopped already");
                    }
                    dfs.shutdownNameNode(i);
                    return "NAMENODE " + i + " STOPPED";
                }
                case "start-namenode": {
                    arguments(words, 1);
                    int i = index(words[1], NAMENODES, "NameNode");
                    startNameNode(i);
                    return "NAMENODE " + i + " STARTED";
                }
                case "stop-datanode": {
                    arguments(words, 1);
                    int i = index(words[1], DATANODES, "DataNode");
                    stopDataNode(i);
                    return "DATANODE " + i + " STOPPED";
                }
                case "start-datanode": {
                    arguments(words, 1);
                    int i = index(words[1], DATANODES, "DataNode");
                    startDataNode(i);
                    return "DATANODE " + i + " STARTED";
                }
                default:
                    throw new IllegalArgumentException("unknown command " + words[0]);
            }
        }

        private static void arguments(String[] words, int count) {
            if (words.length != count + 1) {
                throw new IllegalArgumentException(words[0] + " takes " + count + " argument(s)");
            }
        }

        private static int index(String word, int count, String what) {
            int i = Integer.parseInt(word);
            if (i < 0 || i >= count) {
                throw new IllegalArgumentException("no " + what + " " + i + " (there are " + count + ")");
            }
            return i;
        }

        private String state(int i) {
            NameNode nn = dfs.getNameNode(i);
            return nn == null ? "stopped" : nn.getState().toLowerCase();
        }

        /** Demote {@code from} (if it runs and is active), promote {@code to}; return once {@code to} takes writes. */
        private void failover(int from, int to) throws Exception {
            NameNode target = dfs.getNameNode(to);
            if (target == null) {
                throw new IllegalStateException("NameNode " + to + " is stopped");
            }
            NameNode old = dfs.getNameNode(from);
            if (from != to && old != null && old.isActiveState()) {
                dfs.transitionToStandby(from);
            }
            if (!target.isActiveState()) {
                dfs.transitionToActive(to);
            }
            waitOutOfSafeMode(dfs, to);
        }

        /** Start a stopped NameNode as a standby; return once it has every running DataNode's block report. */
        private void startNameNode(int i) throws Exception {
            if (dfs.getNameNode(i) != null) {
                throw new IllegalStateException("NameNode " + i + " is running");
            }
            // Not waitActive=true: that waits for every NameNode to be up, and the other one may be stopped.
            dfs.restartNameNode(i, false);
            dfs.waitActive(i);
            dfs.waitFirstBRCompleted(i, WAIT_MS);
            waitOutOfSafeMode(dfs, i);
        }

        private void stopDataNode(int i) {
            DataNode node = running[i];
            if (node == null) {
                throw new IllegalStateException("DataNode " + i + " is stopped already");
            }
            int at = dfs.getDataNodes().indexOf(node); // the cluster's own list shifts as nodes stop and start
            stopped[i] = dfs.stopDataNode(at);
            running[i] = null;
        }

        private void startDataNode(int i) throws Exception {
            DataNodeProperties props = stopped[i];
            if (props == null) {
                throw new IllegalStateException("DataNode " + i + " is running");
            }
            if (!dfs.restartDataNode(props, false)) {
                throw new IllegalStateException("MiniDFSCluster did not restart DataNode " + i);
            }
            List<DataNode> nodes = dfs.getDataNodes();
            running[i] = nodes.get(nodes.size() - 1); // a restarted DataNode joins the end of the list
            stopped[i] = null;
            for (int n = 0; n < NAMENODES; n++) {
                if (dfs.getNameNode(n) != null) { // a stopped NameNode is skipped
                    dfs.waitActive(n);
                    dfs.waitFirstBRCompleted(n, WAIT_MS);
                }
            }
        }
    }

    /** Stops the cluster and halts the JVM, skipping MiniDFSCluster's delete-on-exit of the base dir (as MiniHdfs). */
    private static void exit(Cluster cluster) {
        shutdown(cluster);
        Runtime.getRuntime().halt(0);
    }

    /** Stops the cluster once (DataNodes, NameNodes, then JournalNodes); later calls return at once. */
    private static void shutdown(Cluster cluster) {
        if (!STOPPING.compareAndSet(false, true)) {
            return;
        }
        System.out.println("STOPPING");
        System.out.flush();
        try {
            cluster.dfs.shutdown();
        } catch (Throwable t) {
            t.printStackTrace(System.out);
        }
        try {
            cluster.journal.shutdown();
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
        // Routine warnings of a throw-away test cluster, as in MiniHdfs.java, and the JournalNodes'.
        for (String quiet : new String[] {
                "org.apache.hadoop.util.NativeCodeLoader",
                "org.apache.hadoop.security.authentication.server.AuthenticationFilter",
                "org.apache.hadoop.hdfs.server.datanode.web.DatanodeHttpServer",
                "org.apache.hadoop.hdfs.server.datanode.DirectoryScanner",
                // A JournalNode's paxos files: "Unable to delete tmp file" at every epoch (a failover).
                "org.apache.hadoop.hdfs.util.AtomicFileOutputStream"}) {
            p.setProperty("log4j.logger." + quiet, "ERROR");
        }
        PropertyConfigurator.configure(p);
    }
}
