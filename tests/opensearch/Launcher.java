// A single-node OpenSearch server in one JVM, for the elasticsearch output's
// tests and bench: org.opensearch.node.Node with the Netty4 plugin (its HTTP
// and transport layer), as OpenSearch's own test framework (MockNode) builds
// one. No distribution, no plugins folder, no security plugin.
//
//   java -cp "LIBS/*:CLASSES" Launcher DIR HTTP_PORT TRANSPORT_PORT [KEY=VALUE...]
//
// DIR holds path.home, the data and logs; KEY=VALUE are more node settings
// (e.g. thread_pool.write.queue_size=2). Prints "opensearch started" once
// the node runs; a SIGTERM closes it; the process exits when it is closed.
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.Collection;
import java.util.Collections;
import java.util.List;
import java.util.concurrent.CountDownLatch;

import org.opensearch.common.settings.Settings;
import org.opensearch.node.InternalSettingsPreparer;
import org.opensearch.node.Node;
import org.opensearch.plugins.Plugin;
import org.opensearch.transport.Netty4Plugin;

public class Launcher extends Node {
    Launcher(Settings settings, Collection<Class<? extends Plugin>> plugins, Path config) {
        // Node's constructor for plugins on the class path (MockNode's).
        super(InternalSettingsPreparer.prepareEnvironment(settings, Collections.emptyMap(), config, () -> "nagare-test"),
              plugins, false);
    }

    public static void main(String[] args) throws Exception {
        if (args.length < 3) {
            System.err.println("usage: Launcher DIR HTTP_PORT TRANSPORT_PORT [KEY=VALUE...]");
            System.exit(2);
        }
        Path dir = Paths.get(args[0]).toAbsolutePath();
        Path config = dir.resolve("config");
        Files.createDirectories(config);
        Settings.Builder s = Settings.builder()
            .put("path.home", dir.toString())
            .put("path.data", dir.resolve("data").toString())
            .put("path.logs", dir.resolve("logs").toString())
            .put("cluster.name", "nagare-test")
            .put("node.name", "nagare-test")
            .put("discovery.type", "single-node")
            .put("network.host", "127.0.0.1")
            .put("http.port", args[1])
            .put("transport.port", args[2])
            .put("http.type", "netty4")
            .put("transport.type", "netty4")
            // A test machine's disk may be fuller than the watermarks allow:
            // indexes must not turn read-only under the tests.
            .put("cluster.routing.allocation.disk.threshold_enabled", false);
        for (int i = 3; i < args.length; i++) {
            int eq = args[i].indexOf('=');
            if (eq <= 0) {
                System.err.println("not KEY=VALUE: " + args[i]);
                System.exit(2);
            }
            s.put(args[i].substring(0, eq), args[i].substring(eq + 1));
        }
        List<Class<? extends Plugin>> plugins = List.of(Netty4Plugin.class);
        Launcher node = new Launcher(s.build(), plugins, config);
        CountDownLatch closed = new CountDownLatch(1);
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            try {
                node.close();
            } catch (Exception e) {
                e.printStackTrace();
            }
            closed.countDown();
        }));
        node.start();
        System.out.println("opensearch started");
        System.out.flush();
        closed.await();
    }
}
