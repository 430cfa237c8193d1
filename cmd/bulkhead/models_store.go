package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"golang.org/x/term"

	"github.com/bulkhead-ai/bulkhead/models/store"
)

// modelDirUsage documents --model-dir wherever it is registered.
const modelDirUsage = "model directory for pulled models (default $XDG_DATA_HOME/bulkhead/models, else ~/.local/share/bulkhead/models)"

// openStore opens the model directory dir ("" is store.DefaultDir). hf:
// sources use $HF_ENDPOINT when set, as huggingface_hub does.
func openStore(dir string) (*store.Store, error) {
	if dir == "" {
		d, err := store.DefaultDir()
		if err != nil {
			return nil, fmt.Errorf("%w: %v; give --model-dir", errUsage, err)
		}
		dir = d
	}
	return store.New(nil, store.Config{Dir: dir, HFEndpoint: os.Getenv("HF_ENDPOINT")})
}

func runModelsPull(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("models pull SOURCE", stderr)
	name := fs.String("name", "", "model name to register (default: derived from SOURCE; see docs/models.md)")
	sha := fs.String("sha256", "", "expected sha256 of the file, in hex (default: the one the server publishes, if any)")
	force := fs.Bool("force", false, "replace a model registered under the same name, or download it again")
	dir := fs.String("model-dir", "", modelDirUsage)
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return fmt.Errorf("%w: bulkhead models pull SOURCE [--name NAME] [--sha256 HEX] [--force]\n"+
			"  SOURCE is an https:// URL or hf:OWNER/REPO/FILE.gguf[@REVISION]", errUsage)
	}
	if b, err := hex.DecodeString(*sha); *sha != "" && (err != nil || len(b) != sha256.Size) {
		return fmt.Errorf("%w: --sha256 %q is not 64 hex digits", errUsage, *sha)
	}
	st, err := openStore(*dir)
	if err != nil {
		return err
	}
	pp := newProgressPrinter(stderr, time.Now)
	res, err := st.Pull(ctx, pos[0], store.PullOptions{Name: *name, SHA256: *sha, Force: *force, Progress: pp.update})
	pp.finish()
	if err != nil {
		switch {
		case errors.Is(err, store.ErrSource), errors.Is(err, store.ErrInsecure), errors.Is(err, store.ErrName):
			return fmt.Errorf("%w: %v", errUsage, err)
		case errors.Is(err, store.ErrExists):
			return fmt.Errorf("%w (--name NAME, or --force)", err)
		}
		return err
	}
	if res.Present {
		_, err = fmt.Fprintf(stdout, "%s is already in %s (%s, sha256 %s); --force downloads it again\n", res.Name, st.Dir(), humanBytes(res.Size), res.SHA256)
		return err
	}
	check := map[string]string{
		"":                "no checksum was given or published",
		"given":           "matches --sha256",
		"published":       "matches the published checksum",
		"given+published": "matches --sha256 and the published checksum",
	}[res.Verified]
	resumed := ""
	if res.Resumed > 0 {
		resumed = fmt.Sprintf(", resumed at %s", humanBytes(res.Resumed))
	}
	_, err = fmt.Fprintf(stdout, "pulled %s: %s, sha256 %s (%s)%s\n  file  %s\n  serve bulkhead dev --model %s\n",
		res.Name, humanBytes(res.Size), res.SHA256, check, resumed, res.Path, res.Name)
	return err
}

func runModelsList(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("models list", stderr)
	asJSON := fs.Bool("json", false, "print JSON (one array of objects) instead of a table")
	dir := fs.String("model-dir", "", modelDirUsage)
	if err := parse(fs, args); err != nil {
		return err
	}
	st, err := openStore(*dir)
	if err != nil {
		return err
	}
	ls, err := st.List()
	if err != nil {
		return err
	}
	if *asJSON {
		type row struct {
			store.Listed
			Error string `json:"error,omitempty"`
		}
		rows := make([]row, len(ls))
		for i, l := range ls {
			rows[i] = row{Listed: l}
			if l.Err != nil {
				rows[i].Error = l.Err.Error()
			}
		}
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rows)
	}
	if len(ls) == 0 {
		_, err := fmt.Fprintf(stdout, "no models in %s (bulkhead models pull SOURCE adds one)\n", st.Dir())
		return err
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tARCH\tTYPE\tSIZE\tCONTEXT\tPULLED")
	var bad []string
	for _, l := range ls {
		if l.Err != nil {
			fmt.Fprintf(tw, "%s\t?\t?\t%s\t?\t%s\n", l.Name, humanBytes(l.Size), l.PulledAt.Format(time.DateOnly))
			bad = append(bad, fmt.Sprintf("%s: %v", l.Name, l.Err))
			continue
		}
		typ := l.TensorType
		if l.FileType != "" && l.FileType != typ {
			typ = l.FileType + " (" + l.TensorType + ")"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\n", l.Name, l.Arch, typ, humanBytes(l.Size), l.Context, l.PulledAt.Format(time.DateOnly))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, b := range bad {
		fmt.Fprintln(stderr, "warning:", b)
	}
	return nil
}

// parseInterleaved parses flags that may come before, after or between
// positional arguments (`pull SOURCE --name X`), then applies BULKHEAD_*
// variables as parse does. It returns the positional arguments.
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, err
			}
			return nil, fmt.Errorf("%w: %v", errUsage, err)
		}
		rest := fs.Args()
		if len(rest) == 0 {
			break
		}
		if len(args) > len(rest) && args[len(args)-len(rest)-1] == "--" {
			pos = append(pos, rest...) // everything after "--" is positional
			break
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
	return pos, parse(fs, nil)
}

// progressPrinter shows a pull's progress on w: a redrawn bar when w is a
// terminal, else a plain line every 10% (or every 5s when the size is
// unknown).
type progressPrinter struct {
	w        io.Writer
	tty      bool
	now      func() time.Time
	start    time.Time
	last     time.Time // last line printed
	lastStep int64     // last 10% step printed
	from     int64     // bytes present when the transfer started
	shown    bool      // something was printed
}

func newProgressPrinter(w io.Writer, now func() time.Time) *progressPrinter {
	p := &progressPrinter{w: w, now: now, lastStep: -1}
	if f, ok := w.(*os.File); ok && term.IsTerminal(int(f.Fd())) && os.Getenv("TERM") != "dumb" {
		p.tty = true
	}
	return p
}

func (p *progressPrinter) update(pr store.Progress) {
	t := p.now()
	if p.start.IsZero() || pr.Done < p.from {
		p.start, p.from, p.lastStep = t, pr.Done, -1
		if pr.Resumed > 0 {
			fmt.Fprintf(p.w, "%s: resuming at %s\n", pr.Name, humanBytes(pr.Resumed))
		}
	}
	rate := ""
	if el := t.Sub(p.start).Seconds(); el > 0.5 {
		rate = fmt.Sprintf("  %s/s", humanBytes(int64(float64(pr.Done-p.from)/el)))
	}
	if p.tty {
		if t.Sub(p.last) < 100*time.Millisecond && pr.Done != pr.Total {
			return
		}
		p.last, p.shown = t, true
		if pr.Total <= 0 {
			fmt.Fprintf(p.w, "\r\x1b[K%s  %s%s", pr.Name, humanBytes(pr.Done), rate)
			return
		}
		const width = 30
		fill := int(pr.Done * width / pr.Total)
		bar := strings.Repeat("=", fill) + strings.Repeat(" ", width-fill)
		if fill < width {
			bar = bar[:fill] + ">" + bar[fill+1:]
		}
		fmt.Fprintf(p.w, "\r\x1b[K%s [%s] %3d%%  %s / %s%s", pr.Name, bar, pr.Done*100/pr.Total,
			humanBytes(pr.Done), humanBytes(pr.Total), rate)
		return
	}
	if pr.Total > 0 {
		step := pr.Done * 10 / pr.Total
		if step == p.lastStep && t.Sub(p.last) < 10*time.Second {
			return
		}
		p.lastStep, p.last = step, t
		fmt.Fprintf(p.w, "%s: %3d%%  %s of %s%s\n", pr.Name, pr.Done*100/pr.Total, humanBytes(pr.Done), humanBytes(pr.Total), rate)
		return
	}
	if !p.last.IsZero() && t.Sub(p.last) < 5*time.Second {
		return
	}
	p.last = t
	fmt.Fprintf(p.w, "%s: %s%s\n", pr.Name, humanBytes(pr.Done), rate)
}

// finish ends a redrawn bar's line.
func (p *progressPrinter) finish() {
	if p.tty && p.shown {
		fmt.Fprintln(p.w)
	}
}

// humanBytes writes n in binary units: 512 B, 1.5 KiB, 3.2 GiB.
func humanBytes(n int64) string {
	if n < 1024 {
		return fmt.Sprintf("%d B", n)
	}
	v, unit := float64(n), "B"
	for _, u := range []string{"KiB", "MiB", "GiB", "TiB", "PiB"} {
		if v < 1024 {
			break
		}
		v, unit = v/1024, u
	}
	return fmt.Sprintf("%.1f %s", v, unit)
}
