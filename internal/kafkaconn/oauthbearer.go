package kafkaconn

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"time"
	"unicode"

	"cloud.google.com/go/compute/metadata"
	"github.com/segmentio/kafka-go/sasl"
	"golang.org/x/oauth2"
	"golang.org/x/oauth2/google"

	"github.com/cellttl/cellttl/internal/bounded"
	"github.com/cellttl/cellttl/internal/keyfile"
)

// oauthBearer is SASL OAUTHBEARER (RFC 7628, KIP-255), which kafka-go does
// not have: the client sends its bearer token in the initial response, and
// the broker answers nothing on success, or a JSON error. token is asked
// at every handshake, so a token refreshed by its source is taken by the
// next connection.
type oauthBearer struct {
	token func(ctx context.Context) (string, error)
}

func (oauthBearer) Name() string { return "OAUTHBEARER" }

func (m oauthBearer) Start(ctx context.Context) (sasl.StateMachine, []byte, error) {
	tok, err := m.token(ctx)
	if err != nil {
		return nil, nil, err
	}
	// gs2-header "n,,", then the auth key-value pair, each ended by ^A.
	return oauthSession{}, []byte("n,,\x01auth=Bearer " + tok + "\x01\x01"), nil
}

type oauthSession struct{}

// Next takes the broker's answer to the token: nothing is success; a JSON
// error (RFC 7628 3.2.2) is a refusal, returned with the broker's reason.
// The RFC has the client answer ^A before the broker fails the exchange;
// the error is as final, and names the reason the broker gave.
func (oauthSession) Next(_ context.Context, challenge []byte) (bool, []byte, error) {
	if len(challenge) == 0 {
		return true, nil, nil
	}
	return true, nil, fmt.Errorf("the broker refused the OAUTHBEARER token: %s", bounded.Text(string(challenge), bounded.Answer))
}

// maxTokenFile bounds what is read of a token file: a JWT of a few KiB.
const maxTokenFile = 64 << 10

// bearerToken has the shape of a token RFC 6750 allows (b64token): it
// cannot break the SASL message it is put in.
var bearerToken = regexp.MustCompile(`^[A-Za-z0-9\-._~+/]+=*$`)

// fileToken reads the first line of path (keyfile.FirstLine): a token an
// agent beside the worker keeps fresh (a sidecar, a projected volume).
// Errors name the file, never its content.
func fileToken(path string) func(context.Context) (string, error) {
	return func(context.Context) (string, error) {
		tok, err := keyfile.FirstLine(path, "--kafka-sasl-oauthbearer-token-file", maxTokenFile)
		if err != nil {
			return "", err
		}
		if tok = strings.TrimRightFunc(tok, unicode.IsSpace); !bearerToken.MatchString(tok) {
			return "", fmt.Errorf("--kafka-sasl-oauthbearer-token-file %s: the first line is not a bearer token (letters, digits and -._~+/ only)", path)
		}
		return tok, nil
	}
}

// googleToken makes tokens from Application Default Credentials in the
// form Google's Managed Service for Apache Kafka takes (its Java login
// handler's): a JWT-shaped header and claims, base64url, with the OAuth2
// access token in place of the signature. The principal is the service
// account's email: Workload Identity's (the metadata server's), a key
// file's, or an impersonated one's.
func googleToken() func(context.Context) (string, error) {
	g := &googleTokens{busy: make(chan struct{}, 1), find: findGoogleCredentials}
	return g.token
}

// googleFetchTimeout bounds each request the credentials make for a token
// (Google's token endpoint, the metadata server, an impersonation).
const googleFetchTimeout = 30 * time.Second

// googleTokens fetches tokens for the handshakes, one fetch at a time.
type googleTokens struct {
	busy chan struct{} // held by the fetch under way
	find func(ctx context.Context) (oauth2.TokenSource, string, error)

	// Set by the first fetch that finds the credentials; read by later
	// fetches, which busy orders after it.
	src     oauth2.TokenSource
	subject string
}

// token returns a token, or the handshake's context error when the fetch
// outlasts it: a token endpoint that hangs delays a handshake by its own
// timeout, never more, and the fetch, bounded by googleFetchTimeout, goes
// on for the next handshake.
func (g *googleTokens) token(ctx context.Context) (string, error) {
	select {
	case g.busy <- struct{}{}:
	case <-ctx.Done():
		return "", fmt.Errorf("--kafka-sasl-oauthbearer-google: wait for the token being fetched: %w", ctx.Err())
	}
	type fetched struct {
		tok string
		err error
	}
	done := make(chan fetched, 1)
	go func() {
		defer func() { <-g.busy }()
		tok, err := g.fetch()
		done <- fetched{tok, err}
	}()
	select {
	case f := <-done:
		return f.tok, f.err
	case <-ctx.Done():
		return "", fmt.Errorf("--kafka-sasl-oauthbearer-google: an access token: %w", ctx.Err())
	}
}

// fetch finds the credentials once, then asks their token source, which
// refreshes the access token when it nears its expiry. The credentials
// keep the context they are found with for every later refresh: never a
// handshake's, which ends with the handshake (a refresh an hour later
// would fail with its cancellation), but one of their own whose HTTP
// client bounds each request.
func (g *googleTokens) fetch() (string, error) {
	if g.src == nil {
		base := context.WithValue(context.Background(), oauth2.HTTPClient, &http.Client{Timeout: googleFetchTimeout})
		src, subject, err := g.find(base)
		if err != nil {
			return "", err
		}
		// A token is refreshed once it has less than five minutes left
		// (the client's default: ten seconds). kafka-go cannot
		// authenticate a connection again, so a broker enforcing
		// connections.max.reauth.ms closes it when its token expires: a
		// token fresh at the handshake keeps that rare.
		g.src, g.subject = oauth2.ReuseTokenSourceWithExpiry(nil, src, googleEarlyRefresh), subject
	}
	at, err := g.src.Token()
	if err != nil {
		return "", fmt.Errorf("--kafka-sasl-oauthbearer-google: an access token: %w", err)
	}
	return googleKafkaToken(at.AccessToken, g.subject, at.Expiry, time.Now())
}

// findGoogleCredentials finds Application Default Credentials and their
// principal.
func findGoogleCredentials(ctx context.Context) (oauth2.TokenSource, string, error) {
	creds, err := google.FindDefaultCredentials(ctx, "https://www.googleapis.com/auth/cloud-platform")
	if err != nil {
		return nil, "", fmt.Errorf("--kafka-sasl-oauthbearer-google: Application Default Credentials: %w", err)
	}
	pctx, cancel := context.WithTimeout(ctx, googleFetchTimeout)
	defer cancel()
	subject, err := principal(pctx, creds.JSON)
	if err != nil {
		return nil, "", err
	}
	return creds.TokenSource, subject, nil
}

// googleEarlyRefresh is how long before its expiry a token is refreshed.
const googleEarlyRefresh = 5 * time.Minute

// googleKafkaToken is the token for access, of principal subject.
func googleKafkaToken(access, subject string, expiry, now time.Time) (string, error) {
	enc := base64.RawURLEncoding.EncodeToString
	claims, err := json.Marshal(map[string]any{"exp": expiry.Unix(), "iat": now.Unix(), "scope": "kafka", "sub": subject})
	if err != nil {
		return "", err
	}
	return enc([]byte(`{"typ":"JWT","alg":"GOOG_OAUTH2_TOKEN"}`)) + "." + enc(claims) + "." + enc([]byte(access)), nil
}

// principal is the service account of the credentials' JSON, or of the
// metadata server when there is none (GKE, Compute Engine, Cloud Run).
func principal(ctx context.Context, credsJSON []byte) (string, error) {
	if len(credsJSON) == 0 {
		email, err := metadata.EmailWithContext(ctx, "default")
		if err != nil {
			return "", fmt.Errorf("--kafka-sasl-oauthbearer-google: the service account of the metadata server: %w", err)
		}
		return email, nil
	}
	var f struct {
		Email         string `json:"client_email"`
		Impersonation string `json:"service_account_impersonation_url"`
	}
	if err := json.Unmarshal(credsJSON, &f); err != nil {
		return "", fmt.Errorf("--kafka-sasl-oauthbearer-google: the credentials file: %w", err)
	}
	if f.Email != "" {
		return f.Email, nil
	}
	if m := regexp.MustCompile(`serviceAccounts/([^/:]+):generateAccessToken`).FindStringSubmatch(f.Impersonation); m != nil {
		return m[1], nil
	}
	return "", errors.New("--kafka-sasl-oauthbearer-google: the credentials name no service account (a user's own credentials are not taken): use Workload Identity, a service account, or impersonate one")
}
