package deploy

// applied is what the docs tell a user to apply, one install per entry:
// its paths applied in order into one namespace. A path is a kustomization
// directory, rendered as kubectl apply -k renders it, or a plain manifest
// applied as is. TestAcceptedByTheAPIServer applies each entry to a real
// API server, and each of composed too.
var applied = [][]string{
	{"k8s/examples/quickstart"},
	{"k8s/examples/tenants-dir"},
	{"k8s/examples/google-cloud"},
	{"k8s/hpa"},
	{"k8s/keda"},
	{"k8s/tenants-dir"},
	{"k8s/hpa", "k8s/monitoring"},
	{"k8s/keda", "k8s/gmp"},
	{"k8s/hpa", "k8s/network"},
}

// composed are overlays of a user's own, made of the base and these
// components (compose), applied as the entries of applied are: every
// component at least once, beside each autoscaler.
var composed = [][]string{
	{"hpa", "network", "monitoring", "retime"},
	{"keda", "network", "tenants-dir", "retime", "gmp"},
	{"tenants-dir", "monitoring"},
}

// upgrades are the installs of the previous release, as its own tree laid
// them out (from), followed by this tree's (to), in one namespace:
// TestUpgradeFromThePreviousRelease applies both. The retime Job is in
// none: it is applied for a retime and removed once complete, never kept
// across releases (a Job's template cannot change).
var upgrades = []struct{ from, to []string }{
	{from: []string{"k8s/keda"}, to: []string{"k8s/keda"}},
	{from: []string{"k8s/hpa", "k8s/monitoring"}, to: []string{"k8s/hpa", "k8s/monitoring"}},
	{from: []string{"k8s/tenants-dir"}, to: []string{"k8s/tenants-dir"}},
	{from: []string{"k8s/hpa"}, to: []string{"k8s/examples/quickstart"}},
}

// unpublishedCRDs are the API groups the manifests use whose project's
// own CRDs the test's API server cannot install: their objects are left
// out of an apply, saying why. Google's prometheus-engine (PodMonitoring,
// Rules) is not served by the Go module proxy.
var unpublishedCRDs = map[string]string{
	"monitoring.googleapis.com": "the CRDs of Google Cloud Managed Service for Prometheus come from github.com/GoogleCloudPlatform/prometheus-engine, which the Go module proxy does not serve",
}
