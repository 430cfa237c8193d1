//go:build !amd64 || purego || (!linux && !amxemu)

package kernels

// detectAMX: AMX tiles need Linux's grant of tile data and the amd64
// assembly; this build has neither.
func detectAMX() amxInfo { return amxInfo{why: "this build has no AMX kernels (linux/amd64 only)"} }
