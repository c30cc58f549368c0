package echoadapter

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/labstack/echo/v4"

	"github.com/fairgate/fairgate/admission"
	"github.com/fairgate/fairgate/tenant"
)

// TestMiddleware: through Echo, a tenant's request reaches the handler with
// its tenant and RateLimit fields; one without a key gets the contract's
// 401 and never reaches it.
func TestMiddleware(t *testing.T) {
	reg, err := tenant.NewRegistry(tenant.Config{
		Tiers:   map[string]tenant.TierConfig{"pro": {Rate: 10, Burst: 10}},
		Tenants: []tenant.TenantConfig{{ID: "globex", Tier: "pro", APIKeysSHA256: []string{tenant.HashKey("k")}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	g, err := admission.New(admission.Config{Routes: []admission.RouteConfig{{Method: "GET", Path: "/x", Cost: 1}}}, reg, admission.Options{})
	if err != nil {
		t.Fatal(err)
	}
	e := echo.New()
	e.Use(Middleware(g))
	reached := 0
	e.GET("/x", func(c echo.Context) error {
		reached++
		return c.String(http.StatusOK, c.Request().Header.Get(admission.HeaderTenantID))
	})
	req := httptest.NewRequest("GET", "/x", nil)
	req.Header.Set("Authorization", "Bearer k")
	rec := httptest.NewRecorder()
	e.ServeHTTP(rec, req)
	if rec.Code != 200 || rec.Body.String() != "globex" || rec.Header().Get("RateLimit") == "" {
		t.Fatalf("with a key: %d %q %v", rec.Code, rec.Body.String(), rec.Header())
	}
	rec = httptest.NewRecorder()
	e.ServeHTTP(rec, httptest.NewRequest("GET", "/x", nil))
	if rec.Code != http.StatusUnauthorized || reached != 1 {
		t.Fatalf("without a key: %d, handler reached %d times", rec.Code, reached)
	}
}
