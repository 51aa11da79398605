package chartdoc

import (
	"os"
	"strings"
	"testing"
)

// TestTheChartsReadmeIsCurrent: the chart's README holds the table that its
// values.yaml gives, and every value of it has a description.
func TestTheChartsReadmeIsCurrent(t *testing.T) {
	values, err := os.ReadFile("../../charts/maintenance-handler/values.yaml")
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile("../../charts/maintenance-handler/README.md")
	if err != nil {
		t.Fatal(err)
	}
	want, err := Render(readme, values)
	if err != nil {
		t.Fatal(err)
	}
	if string(want) != string(readme) {
		t.Error("charts/maintenance-handler/README.md is not what values.yaml says: make generate")
	}
}

func TestValues(t *testing.T) {
	got, err := Values([]byte(`# a group without a description
image:
  # -- Where it comes from,
  # on two lines.
  repository: r
  # -- Its tag.
  tag: ""
# -- A whole object.
resources:
  limits: {memory: 1Mi}
# -- A list.
args: [a, "b|c"]
# -- A count.
replicas: 2
# -- A switch.
on: true
`))
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, v := range got {
		lines = append(lines, v.Key+" "+v.Type+" "+v.Default+" "+v.Description)
	}
	want := []string{
		`image.repository string "r" Where it comes from, on two lines.`,
		`image.tag string "" Its tag.`,
		`resources object {"limits":{"memory":"1Mi"}} A whole object.`,
		`args list ["a","b|c"] A list.`,
		`replicas int 2 A count.`,
		`on bool true A switch.`,
	}
	if strings.Join(lines, "\n") != strings.Join(want, "\n") {
		t.Errorf("got\n%s\nwant\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}
	out, err := Render([]byte("x\n"+Begin+"\nold\n"+End+"\ny\n"), []byte("# -- A list.\nargs: [\"b|c\"]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if want := "x\n" + Begin + "\n| Key | Type | Default | Description |\n|---|---|---|---|\n| `args` | list | `[\"b\\|c\"]` | A list. |\n" + End + "\ny\n"; string(out) != want {
		t.Errorf("Render:\n%s\nwant\n%s", out, want)
	}
}

func TestAValueWithoutADescriptionIsAnError(t *testing.T) {
	for _, doc := range []string{
		"image:\n  # a comment, not a description\n  tag: v1\n",
		"# -- Documented.\na: 1\nb: 2\n",
		"group: {}\n",
	} {
		if _, err := Values([]byte(doc)); err == nil || !strings.Contains(err.Error(), "has no description") {
			t.Errorf("%q: %v; want an error that a value has no description", doc, err)
		}
	}
	if _, err := Render([]byte("no markers"), []byte("# -- A.\na: 1\n")); err == nil {
		t.Error("a README without the markers: no error")
	}
}
