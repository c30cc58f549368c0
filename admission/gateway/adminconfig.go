package gateway

// AdminConfig configures who the admin listener answers, and its console.
//
// The admin listener shows every tenant, the latest rejections, their
// traces and the metrics, so two rules guard it (adminAccess). On a
// loopback admin_listen it answers only requests whose Host is a loopback
// name: a web page the operator opens cannot rebind its own name to
// 127.0.0.1 and read it. On any other admin_listen a token is required,
// since anyone who can reach the port could read it otherwise.
type AdminConfig struct {
	// Token is the bearer token that every admin request except /healthz
	// and /readyz must carry (Authorization: Bearer <token>), and that
	// the console's login form asks for. At least 16 printable ASCII
	// characters without spaces (openssl rand -hex 32 makes one). Empty
	// means none, which only a loopback admin_listen allows. Applies on
	// reload.
	Token string `yaml:"token"`
	// TokenFile is a file that holds the token instead (a mounted
	// Kubernetes Secret): read at load and again on each reload,
	// whitespace around it trimmed. Relative to the working directory.
	// Set Token or TokenFile, not both.
	TokenFile string `yaml:"token_file"`
	// AllowedHosts are the Host names a loopback admin listener answers
	// besides localhost and loopback addresses: the name an SSH tunnel,
	// /etc/hosts or a local reverse proxy gives it. Exact names (no port,
	// no wildcard), compared without case. Any other Host gets 421. Only
	// for a loopback admin_listen: elsewhere the token guards the
	// listener and every Host is answered, so a list is refused. Empty
	// means none. Applies on reload.
	AllowedHosts []string `yaml:"allowed_hosts"`
	// JaegerUIURL is the base URL of a Jaeger UI that receives the traces
	// (e.g. http://127.0.0.1:16686); the console links each trace ID to
	// it. Empty means no links.
	JaegerUIURL string `yaml:"jaeger_ui_url"`
	// RecentRejections is how many latest rejections the console lists,
	// watched or not (~200 bytes each). 0: 1,000; at most 100,000.
	RecentRejections int `yaml:"recent_rejections"`
	// NativeHistograms exports the request and upstream duration
	// histograms as native histograms as well as classic ones, for a
	// Prometheus with native histograms on (their sparse buckets cost
	// each request more atomic work that cores contend for). False by
	// default. Applies at start.
	NativeHistograms bool `yaml:"native_histograms"`
}
