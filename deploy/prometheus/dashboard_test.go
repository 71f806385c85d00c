package prometheus_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// dashboardFile is the Grafana dashboard operators import.
var dashboardFile = filepath.Join("..", "grafana", "rollstore.json")

// query is one PromQL expression of the dashboard, with where it is.
type query struct {
	where string // panel title and refId, or the variable
	expr  string // as written, Grafana variables included
}

// dashboard is the part of Grafana's dashboard model the checks read.
type dashboard struct {
	Title      string  `json:"title"`
	UID        string  `json:"uid"`
	Panels     []panel `json:"panels"`
	Templating struct {
		List []variable `json:"list"`
	} `json:"templating"`
}

type panel struct {
	ID         int             `json:"id"`
	Type       string          `json:"type"`
	Title      string          `json:"title"`
	Datasource json.RawMessage `json:"datasource"`
	Targets    []struct {
		RefID      string          `json:"refId"`
		Expr       string          `json:"expr"`
		Datasource json.RawMessage `json:"datasource"`
	} `json:"targets"`
	Panels []panel `json:"panels"` // a collapsed row's panels
}

type variable struct {
	Name       string          `json:"name"`
	Type       string          `json:"type"`
	Query      json.RawMessage `json:"query"` // a string, or {"query": "…"}
	Datasource json.RawMessage `json:"datasource"`
}

func loadDashboard(t *testing.T) *dashboard {
	t.Helper()
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	dec := json.NewDecoder(strings.NewReader(string(b)))
	if err := dec.Decode(&d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	return &d
}

// labelValues is a Grafana variable query label_values(selector, label);
// queryResult is query_result(expr).
var (
	labelValues = regexp.MustCompile(`^\s*label_values\((.*),\s*([A-Za-z_][A-Za-z0-9_]*)\s*\)\s*$`)
	queryResult = regexp.MustCompile(`^\s*query_result\((.*)\)\s*$`)
)

// queries returns every PromQL expression of the dashboard: the panels'
// targets, those of the panels inside collapsed rows, and the query
// variables' queries (label_values(selector, label) and
// query_result(expr) give their PromQL part), with problems found on the
// way: a query variable of another kind, a panel or target not on the
// datasource variable, a panel with no query.
func (d *dashboard) queries() (qs []query, errs []error) {
	var walk func(ps []panel, in string)
	walk = func(ps []panel, in string) {
		for _, p := range ps {
			where := in + p.Title
			if p.Type == "row" {
				walk(p.Panels, where+" / ")
				continue
			}
			if len(p.Targets) == 0 {
				errs = append(errs, fmt.Errorf("panel %q has no query", where))
			}
			if !onDatasourceVariable(p.Datasource) {
				errs = append(errs, fmt.Errorf("panel %q: datasource %s, want the ${datasource} variable", where, p.Datasource))
			}
			for _, tg := range p.Targets {
				if strings.TrimSpace(tg.Expr) == "" {
					errs = append(errs, fmt.Errorf("panel %q target %s has no expr", where, tg.RefID))
					continue
				}
				if len(tg.Datasource) > 0 && !onDatasourceVariable(tg.Datasource) {
					errs = append(errs, fmt.Errorf("panel %q target %s: datasource %s, want the ${datasource} variable", where, tg.RefID, tg.Datasource))
				}
				qs = append(qs, query{where: fmt.Sprintf("panel %q %s", where, tg.RefID), expr: tg.Expr})
			}
		}
	}
	walk(d.Panels, "")
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		if !onDatasourceVariable(v.Datasource) {
			errs = append(errs, fmt.Errorf("variable %s: datasource %s, want the ${datasource} variable", v.Name, v.Datasource))
		}
		var s string
		if json.Unmarshal(v.Query, &s) != nil {
			var o struct {
				Query string `json:"query"`
			}
			if err := json.Unmarshal(v.Query, &o); err != nil {
				errs = append(errs, fmt.Errorf("variable %s: query %s: %v", v.Name, v.Query, err))
				continue
			}
			s = o.Query
		}
		where := "variable " + v.Name
		switch {
		case labelValues.MatchString(s):
			qs = append(qs, query{where: where, expr: labelValues.FindStringSubmatch(s)[1]})
		case queryResult.MatchString(s):
			qs = append(qs, query{where: where, expr: queryResult.FindStringSubmatch(s)[1]})
		default:
			errs = append(errs, fmt.Errorf("variable %s: query %q is not label_values(<selector>, <label>) nor query_result(<expr>)", v.Name, s))
		}
	}
	return qs, errs
}

func onDatasourceVariable(raw json.RawMessage) bool {
	var ds struct {
		Type string `json:"type"`
		UID  string `json:"uid"`
	}
	if json.Unmarshal(raw, &ds) != nil {
		return false
	}
	return ds.Type == "prometheus" && (ds.UID == "${datasource}" || ds.UID == "$datasource")
}

// TestDashboardShape: the dashboard imports anywhere (the data source is a
// variable, no fixed id), can be narrowed by namespace, job and pod, and
// has the panels an operator looks at first.
func TestDashboardShape(t *testing.T) {
	d := loadDashboard(t)
	if d.UID == "" || d.Title == "" {
		t.Errorf("the dashboard needs a uid and a title (uid %q, title %q)", d.UID, d.Title)
	}
	vars := map[string]variable{}
	for _, v := range d.Templating.List {
		vars[v.Name] = v
	}
	if v, ok := vars["datasource"]; !ok || v.Type != "datasource" || string(v.Query) != `"prometheus"` {
		t.Errorf("no datasource variable of type prometheus: %+v", v)
	}
	for _, name := range []string{"namespace", "job", "pod"} {
		if v, ok := vars[name]; !ok || v.Type != "query" {
			t.Errorf("no query variable %s", name)
		}
	}
	qs, errs := d.queries()
	for _, err := range errs {
		t.Error(err)
	}
	// Every panel query is narrowed by the three variables.
	for _, q := range qs {
		if !strings.HasPrefix(q.where, "panel") {
			continue
		}
		for _, name := range []string{"namespace", "job", "pod"} {
			if !strings.Contains(q.expr, name+`=~"$`+name+`"`) {
				t.Errorf("%s does not filter on %s=~\"$%s\": %s", q.where, name, name, q.expr)
			}
		}
	}
}

// TestDashboardQueriesParse: every expression of the dashboard is valid
// PromQL once Grafana has put its variables in, and names its metrics.
func TestDashboardQueriesParse(t *testing.T) {
	qs, errs := loadDashboard(t).queries()
	for _, err := range errs {
		t.Error(err)
	}
	if len(qs) < 20 {
		t.Fatalf("only %d queries found in %s", len(qs), dashboardFile)
	}
	for _, q := range qs {
		if _, err := metricNames(expandGrafana(q.expr)); err != nil {
			t.Errorf("%s: %v\n\t%s", q.where, err, q.expr)
		}
	}
}

// TestDashboardMetricsExported: every metric the dashboard reads is in a
// real scrape of rollstore after traffic, except those listed in
// notYetExported.
func TestDashboardMetricsExported(t *testing.T) {
	qs, _ := loadDashboard(t).queries()
	uses := map[string][]string{}
	for _, q := range qs {
		names, err := metricNames(expandGrafana(q.expr))
		if err != nil {
			continue // TestDashboardQueriesParse reports it
		}
		for _, n := range names {
			uses[n] = append(uses[n], q.where)
		}
	}
	checkExported(t, uses)
}
