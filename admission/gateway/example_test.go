package gateway_test

import (
	"log"
	"net/http"

	"github.com/fairgate/fairgate/admission"
	"github.com/fairgate/fairgate/admission/gateway"
	"github.com/fairgate/fairgate/tenant"
)

// Embedding the admission pipeline in your own service: the config file's
// tenants and admission sections (no upstream needed: your handler is the
// upstream), the gate as middleware, and the body limit applied by the
// server. This is the README's embedding snippet; it is compiled with the
// tests.
func Example_embedded() {
	cfg, err := gateway.LoadEmbedded("fairgate.yaml")
	if err != nil {
		log.Fatal(err) // names the file and the field
	}
	reg, err := tenant.NewRegistry(cfg.Tenants)
	if err != nil {
		log.Fatal(err)
	}
	gate, err := admission.New(cfg.Admission, reg, admission.Options{})
	if err != nil {
		log.Fatal(err)
	}
	api := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d, _ := admission.FromContext(r.Context()) // the tenant, route and quotas
		w.Write([]byte("hello " + d.Tenant.ID))
	})
	// The middleware does not bound bodies: server.max_body_bytes applies
	// only if you apply it.
	h := http.MaxBytesHandler(gate.Middleware(api), cfg.Server.MaxBodyBytes)
	log.Fatal(http.ListenAndServe("127.0.0.1:8080", h))
	// With Echo instead: e.Use(echoadapter.Middleware(gate)).
}
