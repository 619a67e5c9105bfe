package broker

import (
	"context"
	"fmt"
	"log/slog"
)

// Logging (Config.Logger): one structured line per admin action and per epoch-change step, a
// warning for every failed or retried step (reconcile.go logs each distinct failure once), and
// long lists summarised (internal/logging), never printed whole.

// natsLogger makes the embedded nats-server log through the broker's logger.
type natsLogger struct{ l *slog.Logger }

func (n natsLogger) Noticef(format string, v ...any) { n.l.Info(fmt.Sprintf(format, v...)) }
func (n natsLogger) Warnf(format string, v ...any)   { n.l.Warn(fmt.Sprintf(format, v...)) }
func (n natsLogger) Errorf(format string, v ...any)  { n.l.Error(fmt.Sprintf(format, v...)) }
func (n natsLogger) Fatalf(format string, v ...any) {
	n.l.Error(fmt.Sprintf(format, v...), "fatal", true)
}
func (n natsLogger) Debugf(format string, v ...any) { n.l.Debug(fmt.Sprintf(format, v...)) }
func (n natsLogger) Tracef(format string, v ...any) {
	n.l.Debug(fmt.Sprintf(format, v...), "trace", true)
}

// setNATSLogger routes the embedded server's log to Config.Logger, when one was given
// (nats-server's debug lines only when the logger shows debug).
func (b *Broker) setNATSLogger() {
	if !b.cfg.natsLogs {
		return
	}
	l := b.cfg.Logger.With("component", "nats")
	b.srv.SetLogger(natsLogger{l}, l.Enabled(context.Background(), slog.LevelDebug), false)
}
