// Package encoder runs encoder-only models (BERT and the bge embedding and
// reranking models llama.cpp loads as "bert"): one forward pass over a batch
// of inputs with bidirectional attention inside each input, then pooling.
//
// It owns the encoder's weights as read from GGUF (Model), the pass
// (Encoder.Encode: token, type and position embeddings, post-LayerNorm
// blocks with a GELU feed-forward, the pooling the file names, and rank
// pooling's classification head) and the L2 normalisation of embeddings
// (Normalize). The arithmetic follows llama.cpp's graph for "bert" op by op,
// so its vectors are the ones llama-embedding prints.
//
// An encoder keeps no KV cache and no prefix cache: a pass's rows live only
// for the pass, and no input attends to another's rows, so inputs of several
// requests and tenants share a pass without reading each other. Inputs over
// the model's window are refused (ErrTooLong), never truncated here.
package encoder
