package tmpdeps
import (
 _ "github.com/prometheus/client_golang/prometheus"
 _ "github.com/prometheus/client_golang/prometheus/promhttp"
 _ "github.com/coder/websocket"
)
