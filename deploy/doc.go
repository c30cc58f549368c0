// Package deploy holds fairgate's deployment files (compose, kubernetes,
// prometheus, grafana, examples) and the tests that keep them in step with
// the code: the configs they mount load, and every metric the alerts and
// the dashboard query is one fairgate exports.
package deploy
