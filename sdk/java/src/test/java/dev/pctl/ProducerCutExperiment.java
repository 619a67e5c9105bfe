package dev.pctl;

import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;

/** Experiment (not a test): produce through a proxy that cuts connections; check with pctl verify. */
public final class ProducerCutExperiment {
    public static void main(String[] a) throws Exception {
        try (Broker b = Broker.start(); CutProxy proxy = new CutProxy(b.url)) {
            b.pctlOk(null, "topic", "create", "t", "--partitions", "2", "--partitioner", "kafka-murmur2");
            List<ProducerRecord> recs = new ArrayList<>();
            List<CompletableFuture<RecordMetadata>> fs = new ArrayList<>();
            try (PctlClient c = PctlClient.connect(ClientOptions.builder().server(proxy.url).creds(b.producer).build());
                    Producer p = c.producer("t", ProducerOptions.builder().id("cutp").build())) {
                for (int i = 0; i < 40000; i++) {
                    ProducerRecord r = ProducerRecord.keyed("k" + (i % 20), Integer.toString(i));
                    recs.add(r);
                    fs.add(p.send(r));
                    if (i % 4000 == 2000) {
                        proxy.cut();
                    }
                }
                p.flush();
            }
            List<RecordMetadata> metas = new ArrayList<>();
            int failed = 0;
            for (CompletableFuture<RecordMetadata> f : fs) {
                try {
                    metas.add(f.join());
                } catch (Exception e) {
                    failed++;
                    metas.add(null);
                }
            }
            System.out.println("failed " + failed + ", cuts " + proxy.cuts.get());
            List<ProducerRecord> okr = new ArrayList<>();
            List<RecordMetadata> okm = new ArrayList<>();
            for (int i = 0; i < recs.size(); i++) {
                if (metas.get(i) != null) {
                    okr.add(recs.get(i));
                    okm.add(metas.get(i));
                }
            }
            Path sent = b.dir.resolve("sent.jsonl");
            Groups.writeSent(sent, "cutp", okr, okm);
            Broker.Result got = b.run(null, true, "consume", "t", "--group", "v", "--from-beginning", "--format", "jsonl", "--idle-exit", "3s");
            Path out = b.dir.resolve("got.jsonl");
            java.nio.file.Files.writeString(out, got.stdout());
            Broker.Result v = b.run(null, false, "verify", "--sent", sent.toString(), "--delivered", "v=" + out);
            System.out.println(v.stdout() + v.stderr());
            java.nio.file.Files.copy(out, Path.of("/tmp/cut-got.jsonl"), java.nio.file.StandardCopyOption.REPLACE_EXISTING);
        }
    }
}
