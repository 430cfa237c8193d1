// Package chart tests what deploy/ ships: the Helm chart in bulkhead/
// (rendered through helm's SDK and decoded strictly into the Kubernetes, KEDA
// and Prometheus Operator types) and the repository's Dockerfile (its stages,
// base, user and entry point, and the static binary its build command makes).
// It is its own module so that the product's module never depends on
// Kubernetes; it holds no product code.
package chart
