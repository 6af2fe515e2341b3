package kafkaconn

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/oauth2"
)

// OAUTHBEARER takes one token source, no password, and TLS unless asked;
// a token file must hold a bearer token, whose text no error quotes.
func TestOAuthBearerSettings(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good, odd := write("tok", "eyJhbGciOiJub25lIn0.eyJzdWIiOiJ4In0.\n"), write("odd", "secret token with spaces\n")
	for _, tt := range []struct {
		s    Security
		want string
	}{
		{Security{SASLMechanism: "OAUTHBEARER", TokenFile: good, TLS: true}, ""},
		{Security{SASLMechanism: "OAUTHBEARER", GoogleToken: true, TLS: true}, ""},
		{Security{SASLMechanism: "OAUTHBEARER", TokenFile: good}, "--allow-plaintext-sasl"},
		{Security{SASLMechanism: "OAUTHBEARER", TokenFile: good, AllowPlaintextSASL: true}, ""},
		{Security{SASLMechanism: "OAUTHBEARER", TLS: true}, "needs one of"},
		{Security{SASLMechanism: "OAUTHBEARER", TokenFile: good, GoogleToken: true, TLS: true}, "needs one of"},
		{Security{SASLMechanism: "OAUTHBEARER", TokenFile: good, Username: "u", TLS: true}, "takes a token"},
		{Security{SASLMechanism: "OAUTHBEARER", TokenFile: odd, TLS: true}, "is not a bearer token"},
		{Security{SASLMechanism: "OAUTHBEARER", TokenFile: write("empty", "\n"), TLS: true}, "is empty"},
		{Security{SASLMechanism: "SCRAM-SHA-512", Username: "u", Password: "p", TokenFile: good}, "without --kafka-sasl-mechanism OAUTHBEARER"},
	} {
		err := tt.s.Validate()
		if (err == nil) != (tt.want == "") || err != nil && !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%+v: %v, want %q", tt.s, err, tt.want)
		}
		if err != nil && strings.Contains(err.Error(), "secret token") {
			t.Errorf("an error quotes the token file: %v", err)
		}
	}
}

// The exchange: the token in the initial response (RFC 7628), success on
// an empty answer, and a refusal that carries the broker's reason.
func TestOAuthBearerExchange(t *testing.T) {
	m := oauthBearer{token: func(context.Context) (string, error) { return "abc.def.", nil }}
	sess, ir, err := m.Start(context.Background())
	if err != nil || string(ir) != "n,,\x01auth=Bearer abc.def.\x01\x01" {
		t.Fatalf("initial response %q, %v", ir, err)
	}
	if done, resp, err := sess.Next(context.Background(), nil); !done || resp != nil || err != nil {
		t.Errorf("an empty answer: done %v, %q, %v; want success", done, resp, err)
	}
	if _, _, err := sess.Next(context.Background(), []byte(`{"status":"invalid_token"}`)); err == nil || !strings.Contains(err.Error(), "invalid_token") {
		t.Errorf("a JSON error: %v", err)
	}
}

// Google's form: a JWT-shaped header and claims, base64url without
// padding, and the access token in the signature's place; the principal
// from a key file or an impersonation, never a user's own credentials.
func TestGoogleKafkaToken(t *testing.T) {
	exp, now := time.Unix(1795000000, 0), time.Unix(1794996400, 0)
	tok, err := googleKafkaToken("ya29.access", "worker@p.iam.gserviceaccount.com", exp, now)
	if err != nil {
		t.Fatal(err)
	}
	parts := strings.Split(tok, ".")
	if len(parts) != 3 || !bearerToken.MatchString(tok) {
		t.Fatalf("token %q: want three parts, a bearer token", tok)
	}
	dec := func(s string) string {
		b, err := base64.RawURLEncoding.DecodeString(s)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	var claims map[string]any
	if err := json.Unmarshal([]byte(dec(parts[1])), &claims); err != nil {
		t.Fatal(err)
	}
	if dec(parts[0]) != `{"typ":"JWT","alg":"GOOG_OAUTH2_TOKEN"}` || dec(parts[2]) != "ya29.access" ||
		claims["sub"] != "worker@p.iam.gserviceaccount.com" || claims["scope"] != "kafka" || claims["exp"] != float64(exp.Unix()) || claims["iat"] != float64(now.Unix()) {
		t.Errorf("header %s, claims %v, signature %s", dec(parts[0]), claims, dec(parts[2]))
	}
	for creds, want := range map[string]string{
		`{"type":"service_account","client_email":"a@p.iam.gserviceaccount.com"}`: "a@p.iam.gserviceaccount.com",
		`{"type":"impersonated_service_account","service_account_impersonation_url":"https://iamcredentials.googleapis.com/v1/projects/-/serviceAccounts/b@p.iam.gserviceaccount.com:generateAccessToken"}`: "b@p.iam.gserviceaccount.com",
		`{"type":"authorized_user","client_id":"x"}`: "",
	} {
		got, err := principal(context.Background(), []byte(creds))
		if got != want || (want == "") != (err != nil) {
			t.Errorf("principal of %s: %q, %v; want %q", creds, got, err, want)
		}
	}
}

// hangingSource is a token source whose Token waits for release: a token
// endpoint that does not answer.
type hangingSource struct{ release chan struct{} }

func (h hangingSource) Token() (*oauth2.Token, error) {
	<-h.release
	return &oauth2.Token{AccessToken: "at", Expiry: time.Now().Add(time.Hour)}, nil
}

// A token endpoint that hangs delays each handshake by the handshake's own
// timeout, no more: those waiting behind the fetch give up with their
// contexts too. Once it answers, the next handshake gets its token.
func TestGoogleTokenEndpointThatHangs(t *testing.T) {
	src := hangingSource{release: make(chan struct{})}
	g := &googleTokens{busy: make(chan struct{}, 1), find: func(context.Context) (oauth2.TokenSource, string, error) {
		return src, "sa@p.iam.gserviceaccount.com", nil
	}}
	errs := make(chan error, 2)
	for range 2 {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			defer cancel()
			_, err := g.token(ctx)
			errs <- err
		}()
	}
	for range 2 {
		select {
		case err := <-errs:
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("a handshake while the endpoint hangs: %v, want its context's deadline", err)
			}
		case <-time.After(3 * time.Second):
			t.Fatal("a handshake with a 200 ms timeout still waits for a hung token endpoint after 3 s")
		}
	}
	close(src.release)
	tok, err := g.token(context.Background())
	if err != nil || !strings.Contains(tok, ".") {
		t.Fatalf("after the endpoint answered: %q, %v", tok, err)
	}
}

// The credentials are found with a context of their own, which their
// token source keeps for every refresh: never the first handshake's, which
// ends with it (an hour later the refresh would fail with "context
// canceled"). Its HTTP client bounds each request.
func TestGoogleCredentialsOutliveTheFirstHandshake(t *testing.T) {
	var kept context.Context
	g := &googleTokens{busy: make(chan struct{}, 1), find: func(ctx context.Context) (oauth2.TokenSource, string, error) {
		kept = ctx
		return oauth2.StaticTokenSource(&oauth2.Token{AccessToken: "at"}), "sa@p.iam.gserviceaccount.com", nil
	}}
	ctx, cancel := context.WithCancel(context.Background())
	if _, err := g.token(ctx); err != nil {
		t.Fatal(err)
	}
	cancel()
	if kept.Err() != nil {
		t.Error("the credentials keep the first handshake's context, cancelled when it ended")
	}
	if c, ok := kept.Value(oauth2.HTTPClient).(*http.Client); !ok || c.Timeout <= 0 {
		t.Error("the credentials' requests have no HTTP client with a timeout")
	}
}

// countingSource counts the tokens it makes, each living for life.
type countingSource struct {
	n    *int
	life time.Duration
}

func (c countingSource) Token() (*oauth2.Token, error) {
	*c.n++
	return &oauth2.Token{AccessToken: fmt.Sprintf("at-%d", *c.n), Expiry: time.Now().Add(c.life)}, nil
}

// A handshake gets a token with five minutes left at least: one nearer
// its expiry is refreshed first (a broker enforcing re-authentication
// would close the connection when it expires). One with an hour left is
// reused.
func TestGoogleTokenRefreshedEarly(t *testing.T) {
	for _, c := range []struct {
		life  time.Duration
		calls int
	}{{4 * time.Minute, 2}, {time.Hour, 1}} {
		n := 0
		g := &googleTokens{busy: make(chan struct{}, 1), find: func(context.Context) (oauth2.TokenSource, string, error) {
			return countingSource{&n, c.life}, "sa@p.iam.gserviceaccount.com", nil
		}}
		for range 2 {
			if _, err := g.token(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
		if n != c.calls {
			t.Errorf("two handshakes, tokens living %s: %d fetched, want %d", c.life, n, c.calls)
		}
	}
}
