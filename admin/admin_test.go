package admin

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/cellttl/cellttl/internal/testenv"
)

func TestEndpoints(t *testing.T) {
	var kafkaDown atomic.Bool
	checks := []Check{
		{Name: "kafka", Fn: func(context.Context) error {
			if kafkaDown.Load() {
				return errors.New("not in the consumer group")
			}
			return nil
		}},
		{Name: "config", Fn: func(context.Context) error { return nil }},
	}
	metrics := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "m 1\n") })
	s := New("127.0.0.1:0", metrics, func(q url.Values) any { return map[string]any{"partitions": 3, "tenants": q.Get("tenants")} }, checks, slog.New(slog.DiscardHandler))
	addr, err := s.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Shutdown(context.Background())
	base := "http://" + addr.String()

	if code, body := testenv.MustGet(t, base+"/healthz"); code != 200 || body != "ok\n" {
		t.Errorf("/healthz: %d %q", code, body)
	}
	if code, body := testenv.MustGet(t, base+"/readyz"); code != 200 || !strings.Contains(body, "kafka: ok") {
		t.Errorf("/readyz: %d %q", code, body)
	}
	kafkaDown.Store(true)
	if code, body := testenv.MustGet(t, base+"/readyz"); code != 503 || !strings.Contains(body, "kafka: not ready: not in the consumer group") || !strings.Contains(body, "config: ok") {
		t.Errorf("/readyz with kafka down: %d %q", code, body)
	}
	if code, body := testenv.MustGet(t, base+"/status"); code != 200 || !strings.Contains(body, `"partitions": 3`) {
		t.Errorf("/status: %d %q", code, body)
	}
	if code, body := testenv.MustGet(t, base+"/status?tenants=false"); code != 200 || !strings.Contains(body, `"tenants": "false"`) {
		t.Errorf("/status?tenants=false: the query does not reach the page: %d %q", code, body)
	}
	if code, body := testenv.MustGet(t, base+"/metrics"); code != 200 || body != "m 1\n" {
		t.Errorf("/metrics: %d %q", code, body)
	}
}

func TestConfigValidateNamesTheFlag(t *testing.T) {
	for addr, ok := range map[string]bool{"": true, ":8080": true, "127.0.0.1:0": true, "8080": false, "host": false} {
		err := Config{Addr: addr}.Validate()
		if (err == nil) != ok || (err != nil && !strings.Contains(err.Error(), "--admin-addr")) {
			t.Errorf("%q: %v", addr, err)
		}
	}
}
