package dev.pctl;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.function.Function;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.junit.jupiter.api.Test;

/**
 * Error mapping (spec/protocol.md §3): every code that crosses the wire is an {@link ErrorCode},
 * a broker reply with it becomes its exception class, and the class carries the code back. The
 * codes are read from the spec's own text, so a code added there fails this test until the SDK
 * has it.
 */
class ErrorCodeTest {
    /** The backquoted codes between "Codes:" and "Clients map codes" in §3, parentheses dropped. */
    private static List<String> specCodes() throws Exception {
        String spec = Files.readString(Repo.path("spec/protocol.md"), StandardCharsets.UTF_8);
        Matcher m = Pattern.compile("\nCodes: (.*?)Clients map codes", Pattern.DOTALL).matcher(spec);
        assertTrue(m.find(), "spec/protocol.md §3 has no 'Codes: ... Clients map codes' sentence any more: update this test");
        Matcher c = Pattern.compile("`([a-z_]+)`").matcher(m.group(1).replaceAll("\\([^)]*\\)", ""));
        List<String> out = new ArrayList<>();
        while (c.find()) {
            out.add(c.group(1));
        }
        return out;
    }

    /** Each §3 code, the class it decodes to, and that class made by its public constructor. */
    private static Map<String, Function<String, PctlException>> classes() {
        Map<String, Function<String, PctlException>> m = new LinkedHashMap<>();
        m.put("bad_request", BadRequestException::new);
        m.put("not_found", NotFoundException::new);
        m.put("exists", ExistsException::new);
        m.put("conflict", ConflictException::new);
        m.put("in_use", InUseException::new);
        m.put("plugin_rejected", PluginRejectedException::new);
        m.put("plugin_failed", PluginFailedException::new);
        m.put("fenced", FencedException::new);
        m.put("change_in_progress", ChangeInProgressException::new);
        m.put("permission", PermissionDeniedException::new);
        m.put("unavailable", UnavailableException::new);
        m.put("out_of_sequence", OutOfSequenceException::new);
        m.put("unsupported", UnsupportedException::new);
        m.put("internal", InternalException::new);
        return m;
    }

    @Test
    void everySpecCodeMapsToItsClassAndBack() throws Exception {
        List<String> spec = specCodes();
        assertEquals(14, spec.size(), "spec/protocol.md §3 lists " + spec.size() + " codes: " + spec);
        assertEquals(spec, Arrays.stream(ErrorCode.values()).map(ErrorCode::wire).toList(), "ErrorCode against §3");
        Map<String, Function<String, PctlException>> classes = classes();
        assertEquals(spec, new ArrayList<>(classes.keySet()));
        for (String code : spec) {
            Class<?> want = classes.get(code).apply("m").getClass();
            PctlException e = PctlException.fromReply(code, "m", "{\"x\":1}");
            assertEquals(want, e.getClass(), "code " + code + " decodes to " + e.getClass().getSimpleName() + ", want " + want.getSimpleName());
            assertEquals(code, e.code().wire());
            assertEquals(code, e.wireCode());
            assertEquals("m", e.getMessage());
            assertEquals("{\"x\":1}", e.detail());
            PctlException made = classes.get(code).apply("m");
            assertEquals(code, made.code().wire(), want.getSimpleName() + " has code " + made.code().wire() + ", want " + code);
            assertEquals(code, made.wireCode());
        }
    }

    @Test
    void anUnknownCodeIsInternalAndKeepsIt() {
        PctlException e = PctlException.fromReply("no_such_code", "m", null);
        assertNotNull(e);
        assertEquals(InternalException.class, e.getClass());
        assertEquals(ErrorCode.INTERNAL, e.code());
        assertEquals("no_such_code", e.wireCode());
    }
}
