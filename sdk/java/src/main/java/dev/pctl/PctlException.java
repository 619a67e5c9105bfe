package dev.pctl;

import dev.pctl.internal.Json;

/**
 * The root of the SDK's errors. Each subclass stands for one {@linkplain ErrorCode code} of
 * spec/protocol.md §3, whether the broker answered with it or the SDK found the problem itself,
 * so a caller can catch {@link NotFoundException} (or switch on {@link #code()}) either way.
 * Unchecked, like the errors of most Java messaging clients: most of them are not recoverable at
 * the call site, and producing completes futures with them.
 *
 * <p>Messages say what failed, with what, and what to do next.
 */
public class PctlException extends RuntimeException {
    private static final long serialVersionUID = 1L;

    private final ErrorCode code;
    private final String wireCode;
    private final String detail;

    /** An error with the given code. */
    public PctlException(ErrorCode code, String message) {
        this(code, message, null, null);
    }

    /** An error with the given code and cause. */
    public PctlException(ErrorCode code, String message, Throwable cause) {
        this(code, message, null, cause);
    }

    PctlException(ErrorCode code, String message, String detail, Throwable cause) {
        this(code, code.wire(), message, detail, cause);
    }

    PctlException(ErrorCode code, String wireCode, String message, String detail, Throwable cause) {
        super(message, cause);
        this.code = code;
        this.wireCode = wireCode;
        this.detail = detail;
    }

    /** The error's code. */
    public ErrorCode code() {
        return code;
    }

    /**
     * The code as the broker wrote it: the same as {@code code().wire()}, unless a newer broker
     * sent a code this SDK does not know (then {@link #code()} is {@link ErrorCode#INTERNAL}).
     */
    public String wireCode() {
        return wireCode;
    }

    /** The broker's optional {@code detail} (raw JSON, e.g. a conformance report), or null. */
    public String detail() {
        return detail;
    }

    /**
     * Whether this is the broker's answer for a topic whose creation has not finished:
     * {@code unavailable} with the detail {@code {"creating": true, "topic": T}} (spec/protocol.md
     * §3). Clients that wait for a new topic decide by the detail, never by the message's words.
     */
    public boolean topicCreating() {
        if (!(this instanceof UnavailableException) || detail == null) {
            return false;
        }
        try {
            return Json.parse(detail) instanceof java.util.Map<?, ?> d && Boolean.TRUE.equals(d.get("creating"));
        } catch (Json.JsonException e) {
            return false;
        }
    }

    /**
     * The exception for a broker error reply (spec/protocol.md §3): the class of its code, except
     * that {@code unavailable} with a detail {@code "in_process": true} (a record whose
     * Nats-Msg-Id is stuck, §5.1.5) is a {@link MsgIdInProcessException}, which a thin client does
     * not re-send under the same identity (§5.2 step 5). {@code detail} is the raw JSON detail; a
     * batched produce reply's per-record {@code error} maps the same way.
     */
    public static PctlException fromReply(String code, String message, String detail) {
        ErrorCode c = ErrorCode.fromWire(code);
        String msg = message == null || message.isEmpty() ? "the broker answered " + code : message;
        switch (c) {
            case BAD_REQUEST:
                return new BadRequestException(msg, detail, null);
            case NOT_FOUND:
                return new NotFoundException(msg, detail, null);
            case EXISTS:
                return new ExistsException(msg, detail, null);
            case CONFLICT:
                return new ConflictException(msg, detail, null);
            case IN_USE:
                return new InUseException(msg, detail, null);
            case PLUGIN_REJECTED:
                return new PluginRejectedException(msg, null, null, null, detail, null);
            case PLUGIN_FAILED:
                return new PluginFailedException(msg, null, null, null, detail, null);
            case FENCED:
                return new FencedException(msg, detail, null);
            case CHANGE_IN_PROGRESS:
                return new ChangeInProgressException(msg, detail, null);
            case PERMISSION:
                return new PermissionDeniedException(msg, null, null, detail);
            case UNAVAILABLE:
                MsgIdInProcessException stuck = MsgIdInProcessException.fromReply(msg, detail);
                return stuck != null ? stuck : new UnavailableException(msg, detail, null);
            case OUT_OF_SEQUENCE:
                return new OutOfSequenceException(msg, detail, null);
            case UNSUPPORTED:
                return new UnsupportedException(msg, detail, null);
            default:
                return new InternalException(code == null ? "internal" : code, msg, detail, null);
        }
    }
}
