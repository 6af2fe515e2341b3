package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"

	"github.com/cellttl/cellttl/loadtest/synth"
)

// avroSubject is the subject the load test registers its schema under.
const avroSubject = "cellttl-loadtest-click-value"

// valueFormat turns shape into the --value-format asked for: for avro, the
// schema is registered at registryURL and the shape's values are framed
// with its id; the worker flags that read it (the format and the
// registry) are returned. json leaves the
// shape as it is.
func valueFormat(ctx context.Context, format, registryURL string, shape synth.Shape) (synth.Shape, []string, error) {
	switch format {
	case "", "json":
		return shape, nil, nil
	case "avro":
	default:
		return shape, nil, fmt.Errorf("--value-format %q: want json or avro", format)
	}
	if registryURL == "" {
		return shape, nil, errors.New("--value-format avro needs --schema-registry-url (scripts/services.sh starts Apicurio Registry; --embedded starts one in process)")
	}
	id, err := synth.RegisterAvro(ctx, registryURL, avroSubject)
	if err != nil {
		return shape, nil, err
	}
	s, err := synth.Avro(shape, id)
	if err != nil {
		return shape, nil, err
	}
	return s, []string{"--value-format", "avro", "--schema-registry-url", registryURL}, nil
}

// startRegistry serves the load test's one schema the way a schema
// registry's Confluent-compatible API does (registration, and the schema
// by id), for --embedded: the embedded run needs no service of its own.
func startRegistry() (url string, stop func(), err error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, fmt.Errorf("start the embedded schema registry: %w", err)
	}
	const id = 1
	mux := http.NewServeMux()
	mux.HandleFunc("POST /subjects/{subject}/versions", func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(map[string]int{"id": id})
	})
	mux.HandleFunc("GET /schemas/ids/{id}", func(w http.ResponseWriter, r *http.Request) {
		if r.PathValue("id") != fmt.Sprint(id) {
			w.WriteHeader(http.StatusNotFound)
			_ = json.NewEncoder(w).Encode(map[string]any{"error_code": 40403, "message": "Schema not found"})
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]string{"schema": synth.AvroSchema, "schemaType": "AVRO"})
	})
	srv := &http.Server{Handler: mux}
	go func() { _ = srv.Serve(l) }()
	return "http://" + l.Addr().String(), func() { _ = srv.Close() }, nil
}
