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

import java.io.File;
import java.net.InetSocketAddress;
import java.util.Properties;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.permission.FsPermission;
import org.apache.hadoop.hdfs.HdfsConfiguration;
import org.apache.hadoop.hdfs.MiniDFSCluster;
import org.apache.hadoop.util.ShutdownHookManager;
import org.apache.log4j.PropertyConfigurator;
import sun.misc.Signal;

public final class MiniHdfs {
    /** Runs before Hadoop's own hooks (the FileSystem cache closes at priority 10). */
    private static final int HOOK_PRIORITY = 100;
    private static final AtomicBoolean STOPPING = new AtomicBoolean();
    private static final int DATANODES = 2;

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
        // check the length (connectors/hdfs/_fs.py), so the tests see what such clusters do.
        conf.setInt("dfs.replication", DATANODES);
        conf.setInt("dfs.namenode.file.close.num-committed-allowed", 1);
        // Loopback only: the builder keeps these because of checkDataNodeAddrConfig(true).
        conf.set("dfs.datanode.address", "127.0.0.1:0");
        conf.set("dfs.datanode.http.address", "127.0.0.1:0");
        conf.set("dfs.datanode.https.address", "127.0.0.1:0");
        conf.set("dfs.datanode.ipc.address", "127.0.0.1:0");
        conf.set("dfs.namenode.https-address", "127.0.0.1:0");

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

        InetSocketAddress rpc = cluster.getNameNode().getNameNodeAddress();
        InetSocketAddress http = cluster.getNameNode().getHttpAddress();
        System.out.println("READY rpc=127.0.0.1:" + rpc.getPort() + " http=127.0.0.1:" + http.getPort());
        System.out.flush();
        Thread.currentThread().join();
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
