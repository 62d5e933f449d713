// Package channel holds the gRPC options of the channel between the host and its agent,
// which both ends must agree on: window and buffer sizes, message sizes, the codec and the
// buffer pool.
package channel

import (
	"google.golang.org/grpc"
	"google.golang.org/grpc/experimental"
)

// Window and buffer sizes for the channel: output arrives in chunks of up to 1 MiB, and
// HTTP/2's default 64 KiB window would stall the stream on every chunk.
const (
	windowSize = 16 << 20
	bufferSize = 1 << 20
	// maxResponseSize is the largest answer the host takes: an ExecuteResponse whose
	// stdout and stderr are both at MaxExecuteOutput, and room for the rest of it.
	maxResponseSize = 2*MaxExecuteOutput + 1<<20
)

// MaxRequestSize is the largest request the agent takes: what a host may make it hold in
// memory at once.
const MaxRequestSize = 16 << 20

// MaxExecuteOutput is the most an exec may ask to keep of stdout, and of stderr (the
// API's max_output_bytes maximum). The channel's message size is derived from it, so
// that a result at the bound arrives whole.
const MaxExecuteOutput = 16 << 20

// ServerOptions are the gRPC server options of the agent's channel.
func ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.InitialWindowSize(windowSize),
		grpc.InitialConnWindowSize(windowSize),
		grpc.WriteBufferSize(bufferSize),
		grpc.ReadBufferSize(bufferSize),
		grpc.MaxRecvMsgSize(MaxRequestSize),
		grpc.ForceServerCodecV2(Codec{}),
		experimental.BufferPool(Buffers),
	}
}

// DialOptions are the matching client options.
func DialOptions() []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithInitialWindowSize(windowSize),
		grpc.WithInitialConnWindowSize(windowSize),
		grpc.WithWriteBufferSize(bufferSize),
		grpc.WithReadBufferSize(bufferSize),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxResponseSize), grpc.MaxCallSendMsgSize(MaxRequestSize), grpc.ForceCodecV2(Codec{})),
		experimental.WithBufferPool(Buffers),
	}
}
