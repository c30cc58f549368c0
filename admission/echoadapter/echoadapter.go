// Package echoadapter serves the admission pipeline as Echo middleware,
// for a service built on Echo (github.com/labstack/echo/v4) that embeds
// it. It is a package of its own so that the pipeline, and what imports
// it, do not link Echo.
package echoadapter

import (
	"github.com/labstack/echo/v4"

	"github.com/fairgate/fairgate/admission"
)

// Middleware returns g as Echo middleware: g.Middleware, with the handler
// chain after it as the upstream.
func Middleware(g *admission.Gate) echo.MiddlewareFunc { return echo.WrapMiddleware(g.Middleware) }
