package lab

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"
)

// workerStatus is the part of the worker's /status read here.
type workerStatus struct {
	Lag   int64 `json:"lag"`
	Kafka struct {
		Joined     bool       `json:"joined"`
		Partitions []struct{} `json:"partitions"`
	} `json:"kafka"`
	Events map[string]eventTotals `json:"events"`
	// Totals is the sum of Events; the brief page (?tenants=false) has
	// only it.
	Totals   *eventTotals `json:"totals"`
	Erasures struct {
		ErasedUsers int `json:"erased_users"`
	} `json:"erasures"`
}

type eventTotals struct {
	Written      int64 `json:"written"`
	DeadLettered int64 `json:"dead_lettered"`
	Expired      int64 `json:"expired"`
}

// Status is the worker's cumulative counts over all tenants and its lag.
type Status struct {
	Written, Dead, Expired, Lag int64
	// Reading: the worker joined the group and owns partitions.
	Reading bool
	// ErasedUsers is the erased users in force in its erasure ledger.
	ErasedUsers int
}

// FetchStatus reads the worker's /status (the full page or the brief one)
// at url.
func FetchStatus(ctx context.Context, url string) (Status, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return Status{}, err
	}
	defer resp.Body.Close()
	var s workerStatus
	if err := json.NewDecoder(resp.Body).Decode(&s); err != nil {
		return Status{}, fmt.Errorf("worker status: %w", err)
	}
	t := Status{Lag: s.Lag, Reading: s.Kafka.Joined && len(s.Kafka.Partitions) > 0, ErasedUsers: s.Erasures.ErasedUsers}
	if e := s.Totals; e != nil {
		t.Written, t.Dead, t.Expired = e.Written, e.DeadLettered, e.Expired
		return t, nil
	}
	for _, e := range s.Events { // a worker from before the totals
		t.Written += e.Written
		t.Dead += e.DeadLettered
		t.Expired += e.Expired
	}
	return t, nil
}
