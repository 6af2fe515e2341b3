package main

import (
	"context"

	"cloud.google.com/go/bigtable"

	"github.com/cellttl/cellttl/sink"
	"github.com/cellttl/cellttl/tablemeta"
	"github.com/cellttl/cellttl/tenants"
)

// tableCheck is what worker check reads of the table: its GC rule against
// the file's, the workers' record, and its timestamp granularity.
type tableCheck struct {
	Target  string `json:"target"`
	Exists  bool   `json:"exists"`
	Rule    string `json:"rule,omitempty"`
	Wanted  string `json:"wanted"`
	Matches bool   `json:"matches"`
	Error   string `json:"error,omitempty"`
	// Record is what keeps a worker from starting on the table besides
	// the rule: the workers' record family missing, or its rule
	// collecting by age.
	Record string `json:"record,omitempty"`
	// Granularity is the table's timestamp granularity, and Means what
	// cellttl does under it.
	Granularity sink.Granularity `json:"timestamp_granularity,omitempty"`
	Means       string           `json:"timestamp_granularity_means,omitempty"`
}

func checkTable(ctx context.Context, tc sink.TableConfig, cfg *tenants.Config) *tableCheck {
	want := cfg.Policy.GCMaxAge()
	res := &tableCheck{Target: tc.Target().String(), Wanted: sink.DescribeGC(bigtable.MaxAgePolicy(want))}
	// A wait past --service-timeout is said as such (waitErr): status 3.
	dc, ac, err := tc.Clients(ctx)
	if err != nil {
		res.Error = waitErr(ctx, err).Error()
		return res
	}
	defer dc.Close()
	defer ac.Close()
	fam, err := sink.ReadFamily(ctx, ac, tc.Target())
	if err != nil {
		res.Error = waitErr(ctx, err).Error()
		return res
	}
	res.Exists = fam.Exists
	if fam.TableExists {
		tables, err := tc.TableAdmin(ctx)
		if err == nil {
			defer tables.Close()
			res.Granularity, err = tables.Granularity(ctx, tc.Table)
			res.Means = res.Granularity.Means()
		}
		if err != nil {
			res.Error = waitErr(ctx, err).Error()
			return res
		}
	}
	if fam.Exists {
		res.Rule = sink.DescribeGC(fam.Rule)
		res.Matches = fam.Matches(want)
		switch err := tablemeta.CheckFamily(ctx, ac, tc.Table); {
		case tablemeta.Unfit(err):
			res.Record = err.Error()
		case err != nil:
			res.Error = waitErr(ctx, err).Error()
		}
	}
	return res
}
