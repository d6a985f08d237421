package httpapi

import (
	"net/http"
)

// writeCreated answers a create: 201 with the resource's Location when
// this call created it, 200 when it answers an earlier call's (a retry).
func writeCreated(w http.ResponseWriter, created bool, location string, v any) {
	status := http.StatusOK
	if created {
		status = http.StatusCreated
		if location != "" {
			w.Header().Set("Location", location)
		}
	}
	writeJSON(w, status, v)
}
