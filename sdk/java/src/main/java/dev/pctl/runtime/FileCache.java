package dev.pctl.runtime;

import com.dylibso.chicory.compiler.Cache;
import java.io.IOException;
import java.nio.file.AtomicMoveNotSupportedException;
import java.nio.file.FileAlreadyExistsException;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;

/**
 * Keeps the JVM classes that Chicory's compiler makes from a module in a directory, one file per
 * module digest, so that a later process skips compiling the same module (the Go host's
 * {@code CacheDir} does the same for wazero). Files are published by an atomic rename, so
 * concurrent processes never see half a file; a corrupt or unreadable entry is treated as
 * absent. The key is the digest of the module as given to Chicory (after the host's rewrite), and
 * the directory name carries the Chicory version, so a changed module or engine never hits an
 * old entry.
 */
final class FileCache implements Cache {
    private final Path dir;

    /** Entries go to dir/chicory-VERSION (the Chicory version this host was built with). */
    FileCache(Path dir) {
        this.dir = dir.resolve("chicory-" + chicoryVersion());
    }

    static String chicoryVersion() {
        try (var in = FileCache.class.getResourceAsStream("/pctl-runtime.properties")) {
            var p = new java.util.Properties();
            if (in != null) {
                p.load(in);
            }
            return p.getProperty("chicory.version", "unknown");
        } catch (IOException e) {
            return "unknown";
        }
    }

    private Path file(String key) {
        return dir.resolve(Plugin.sha256(key.getBytes(java.nio.charset.StandardCharsets.UTF_8)) + ".jar");
    }

    @Override
    public byte[] get(String key) {
        try {
            return Files.readAllBytes(file(key));
        } catch (NoSuchFileException e) {
            return null;
        } catch (IOException e) {
            return null;
        }
    }

    @Override
    public void putIfAbsent(String key, byte[] data) {
        Path target = file(key);
        if (Files.exists(target)) {
            return;
        }
        try {
            Files.createDirectories(dir);
            Path tmp = Files.createTempFile(dir, ".tmp-", ".jar");
            try {
                Files.write(tmp, data);
                try {
                    Files.move(tmp, target, StandardCopyOption.ATOMIC_MOVE);
                } catch (AtomicMoveNotSupportedException | FileAlreadyExistsException e) {
                    // another process won, or the filesystem cannot rename atomically: skip
                }
            } finally {
                Files.deleteIfExists(tmp);
            }
        } catch (IOException | RuntimeException e) {
            // A cache that cannot be written only costs time.
        }
    }
}
