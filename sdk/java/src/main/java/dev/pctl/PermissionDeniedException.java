package dev.pctl;

/**
 * Code {@code permission} (spec/protocol.md §3, §8): the credentials' role may not use a subject.
 * The NATS server reports a forbidden publish asynchronously; the SDK turns it into this error at
 * once, naming the subject and the role it needs, instead of waiting for a timeout. Also raised
 * when the broker refuses the credentials at connect.
 */
public class PermissionDeniedException extends PctlException {
    private static final long serialVersionUID = 1L;

    private final String subject;
    private final String role;

    /** An error with this message. */
    public PermissionDeniedException(String message) {
        this(message, null, null, null);
    }

    PermissionDeniedException(String message, String subject, String role, String detail) {
        super(ErrorCode.PERMISSION, message, detail, null);
        this.subject = subject;
        this.role = role;
    }

    /** The subject that was refused, or null if the broker refused something else. */
    public String subject() {
        return subject;
    }

    /** The role that may use the subject ("producer or admin", ...), or null if unknown. */
    public String role() {
        return role;
    }

    /** The error for a publish or subscription the server refused (spec/protocol.md §8). */
    static PermissionDeniedException forSubject(String op, String subject) {
        String role;
        String hint;
        if (subject.startsWith("pctl.admin.")) {
            role = "admin";
            hint = "this needs the admin role (connect with the broker's admin.nk)";
        } else if (subject.startsWith("pctl.data.") || subject.startsWith("pctl.produce.")) {
            role = "producer or admin";
            hint = "producing needs the producer or admin role (connect with producer.nk)";
        } else if (subject.startsWith("$KV.pctl-groups.") || subject.startsWith("$JS.API.CONSUMER.")) {
            role = "consumer or admin";
            hint = "consuming needs the consumer or admin role (connect with consumer.nk)";
        } else {
            role = null;
            hint = "check the role of the credentials you connect with";
        }
        return new PermissionDeniedException(String.format("permission denied: these credentials may not %s %s; %s", op, subject, hint),
                subject, role, null);
    }
}
