// Package tenant turns a credential into a tenant: it holds the configured
// tiers and their quotas, the tenants and the SHA-256 hashes of their API
// keys, and looks a presented key up without keeping or logging it.
//
// A tenant is identified only by an authenticated API key, never by the
// client's IP address or a header the client sets. Keys are stored hashed;
// a lookup hashes the presented key and finds the tenant by that hash, so
// the time a lookup takes depends on the SHA-256 of the key, which a guesser
// cannot steer towards a real key's hash.
package tenant
