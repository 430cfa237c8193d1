package client

import (
	"context"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/url"
	"time"
)

// Finetune is one of the tenant's LoRA adapters (finetunes).
type Finetune struct {
	ID          string         `json:"id"`
	Name        string         `json:"name"`
	Model       string         `json:"model"`
	Description string         `json:"description"`
	CreatedAt   time.Time      `json:"created_at"`
	Files       []FinetuneFile `json:"files"`
}

// FinetuneFile is one stored file of a finetune.
type FinetuneFile struct {
	Name   string `json:"name"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

func (c *Client) finetunesURL(rest string) string {
	return c.prefix() + "/ai/finetunes" + rest
}

// do sends a request with the token and decodes a native envelope's result
// into out (nil: discarded); a refusal is an *APIError.
func (c *Client) do(req *http.Request, out any) error {
	req.Header.Set("Authorization", "Bearer "+c.token)
	resp, err := c.hc.Do(req)
	if err != nil {
		return err
	}
	if resp.StatusCode/100 != 2 {
		defer resp.Body.Close()
		data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		return parseError(resp.StatusCode, data)
	}
	var discard any
	if out == nil {
		out = &discard
	}
	return decodeResult(resp, out)
}

// CreateFinetune creates an empty finetune of model (a catalog
// text-generation model) named name, unique among the tenant's.
func (c *Client) CreateFinetune(ctx context.Context, name, model, description string) (*Finetune, error) {
	resp, err := c.post(ctx, c.finetunesURL(""), map[string]string{"name": name, "model": model, "description": description})
	if err != nil {
		return nil, err
	}
	var f Finetune
	if err := decodeResult(resp, &f); err != nil {
		return nil, err
	}
	return &f, nil
}

// ListFinetunes lists the tenant's finetunes.
func (c *Client) ListFinetunes(ctx context.Context) ([]Finetune, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.finetunesURL(""), nil)
	if err != nil {
		return nil, err
	}
	var out []Finetune
	return out, c.do(req, &out)
}

// GetFinetune returns the tenant's finetune with id (or name) ref.
func (c *Client) GetFinetune(ctx context.Context, ref string) (*Finetune, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.finetunesURL("/"+url.PathEscape(ref)), nil)
	if err != nil {
		return nil, err
	}
	var f Finetune
	return &f, c.do(req, &f)
}

// DeleteFinetune deletes the tenant's finetune id and its files.
func (c *Client) DeleteFinetune(ctx context.Context, id string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodDelete, c.finetunesURL("/"+url.PathEscape(id)), nil)
	if err != nil {
		return err
	}
	return c.do(req, nil)
}

// UploadFinetuneAsset uploads one adapter file (adapter_model.safetensors,
// adapter_config.json or a .gguf adapter) named fileName to finetune id, as
// Workers AI's finetune-assets takes it (multipart file_name and file),
// streaming r.
func (c *Client) UploadFinetuneAsset(ctx context.Context, id, fileName string, r io.Reader) (*Finetune, error) {
	pr, pw := io.Pipe()
	mw := multipart.NewWriter(pw)
	go func() {
		err := mw.WriteField("file_name", fileName)
		var fw io.Writer
		if err == nil {
			fw, err = mw.CreateFormFile("file", fileName)
		}
		if err == nil {
			_, err = io.Copy(fw, r)
		}
		if err == nil {
			err = mw.Close()
		}
		pw.CloseWithError(err)
	}()
	defer pr.Close() // ends the writer if the request stopped reading
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.finetunesURL("/"+url.PathEscape(id)+"/finetune-assets"), pr)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", mw.FormDataContentType())
	var f Finetune
	if err := c.do(req, &f); err != nil {
		return nil, fmt.Errorf("uploading %s: %w", fileName, err)
	}
	return &f, nil
}
