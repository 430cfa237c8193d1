package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"text/tabwriter"
	"time"

	"github.com/bulkhead-ai/bulkhead/edge/client"
)

// finetunesCommands are `bulkhead finetunes`'s subcommands: the tenant's
// LoRA adapters through a running edge's finetune API (docs/lora.md).
func finetunesCommands() []command {
	return []command{
		{"create", "create an empty finetune of a model: --name, --model [--description]", runFinetunesCreate},
		{"upload", "upload adapter files to a finetune: --id and --file (adapter_model.safetensors and adapter_config.json, or one .gguf)", runFinetunesUpload},
		{"list", "list your finetunes", runFinetunesList},
		{"delete", "delete a finetune and its files: --id", runFinetunesDelete},
	}
}

func runFinetunes(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 {
		for _, c := range finetunesCommands() {
			if c.name == args[0] {
				return c.run(ctx, args[1:], stdout, stderr)
			}
		}
	}
	msg := "bulkhead finetunes create|upload|list|delete ..."
	for _, c := range finetunesCommands() {
		msg += fmt.Sprintf("\n  %-6s %s", c.name, c.summary)
	}
	return fmt.Errorf("%w: %s", errUsage, msg)
}

// edgeClientFlags are the flags every client command of the finetune API
// takes: the edge, the token, and optionally the account route.
type edgeClientFlags struct {
	edge, token, account string
	timeout              time.Duration
	json                 bool
}

func (f *edgeClientFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.edge, "edge", "http://127.0.0.1:8787", "edge base URL")
	fs.StringVar(&f.token, "token", os.Getenv("BULKHEAD_TOKEN"), "bearer token with scope finetunes:write (default $BULKHEAD_TOKEN)")
	fs.StringVar(&f.account, "account", "", "use the /client/v4/accounts/<account>/ai routes (the token's tenant)")
	fs.DurationVar(&f.timeout, "timeout", 10*time.Minute, "limit on the whole command")
	fs.BoolVar(&f.json, "json", false, "print JSON")
}

// client checks the flags and returns the edge client and the command's
// context.
func (f *edgeClientFlags) client(ctx context.Context) (*client.Client, context.Context, context.CancelFunc, error) {
	if f.token == "" {
		return nil, nil, nil, fmt.Errorf("%w: give --token or set BULKHEAD_TOKEN", errUsage)
	}
	var opts []client.Option
	if f.account != "" {
		opts = append(opts, client.WithAccount(f.account))
	}
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	return client.New(f.edge, f.token, opts...), ctx, cancel, nil
}

func runFinetunesCreate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var f edgeClientFlags
	fs := newFlags("finetunes create", stderr)
	f.register(fs)
	name := fs.String("name", "", "the finetune's name, unique among yours")
	model := fs.String("model", "", "the base model's catalog name")
	desc := fs.String("description", "", "a description")
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := require(fs, "name", "model"); err != nil {
		return err
	}
	c, ctx, cancel, err := f.client(ctx)
	if err != nil {
		return err
	}
	defer cancel()
	ft, err := c.CreateFinetune(ctx, *name, *model, *desc)
	if err != nil {
		return err
	}
	return printFinetunes(stdout, f.json, ft)
}

func runFinetunesUpload(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var f edgeClientFlags
	var files listFlag
	fs := newFlags("finetunes upload", stderr)
	f.register(fs)
	id := fs.String("id", "", "the finetune's id (or name)")
	fs.Var(&files, "file", "an adapter file to upload, named by its base name (repeat: PEFT's adapter_config.json and adapter_model.safetensors)")
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := require(fs, "id"); err != nil {
		return err
	}
	if len(files) == 0 {
		return fmt.Errorf("%w: give --file at least once", errUsage)
	}
	c, ctx, cancel, err := f.client(ctx)
	if err != nil {
		return err
	}
	defer cancel()
	ft, err := c.GetFinetune(ctx, *id)
	if err != nil {
		return err
	}
	for _, path := range files {
		if ft, err = uploadFile(ctx, c, ft.ID, path); err != nil {
			return err
		}
	}
	return printFinetunes(stdout, f.json, ft)
}

func uploadFile(ctx context.Context, c *client.Client, id, path string) (*client.Finetune, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	return c.UploadFinetuneAsset(ctx, id, filepath.Base(path), fh)
}

func runFinetunesList(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var f edgeClientFlags
	fs := newFlags("finetunes list", stderr)
	f.register(fs)
	if err := parse(fs, args); err != nil {
		return err
	}
	c, ctx, cancel, err := f.client(ctx)
	if err != nil {
		return err
	}
	defer cancel()
	list, err := c.ListFinetunes(ctx)
	if err != nil {
		return err
	}
	fts := make([]*client.Finetune, len(list))
	for i := range list {
		fts[i] = &list[i]
	}
	if f.json {
		if list == nil {
			list = []client.Finetune{}
		}
		return json.NewEncoder(stdout).Encode(list)
	}
	return printFinetunes(stdout, false, fts...)
}

func runFinetunesDelete(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var f edgeClientFlags
	fs := newFlags("finetunes delete", stderr)
	f.register(fs)
	id := fs.String("id", "", "the finetune's id")
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := require(fs, "id"); err != nil {
		return err
	}
	c, ctx, cancel, err := f.client(ctx)
	if err != nil {
		return err
	}
	defer cancel()
	if err := c.DeleteFinetune(ctx, *id); err != nil {
		return err
	}
	_, err = fmt.Fprintf(stdout, "deleted %s\n", *id)
	return err
}

// printFinetunes prints finetunes as JSON (one, as an object) or a table.
func printFinetunes(w io.Writer, asJSON bool, fts ...*client.Finetune) error {
	if asJSON && len(fts) == 1 {
		return json.NewEncoder(w).Encode(fts[0])
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tNAME\tMODEL\tFILES\tCREATED")
	for _, f := range fts {
		names := ""
		for i, file := range f.Files {
			if i > 0 {
				names += ","
			}
			names += file.Name
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", f.ID, f.Name, f.Model, names, f.CreatedAt.Format(time.RFC3339))
	}
	return tw.Flush()
}
