// Package v20170312 stands in for Tencent Cloud's VPC SDK, which the Go module proxy here does not serve:
// flannel's main links every backend, and only its tencentvpc backend calls this SDK. peerlab's
// clusters use flannel's vxlan backend; this package refuses every call, so a flannel configured
// for tencentvpc fails with a message saying why instead of acting on a cloud it cannot reach.
package v20170312

import "errors"

var errNotBuilt = errors.New("flannel's tencentvpc backend is not built into peerlab's flannel (use the vxlan backend)")

type Client struct{}

type Filter struct {
	Name   *string
	Values []*string
}

type Route struct {
	DestinationCidrBlock *string
	GatewayType          *string
	GatewayId            *string
	RouteId              *uint64
	RouteType            *string
	Enabled              *bool
}

type RouteTable struct {
	RouteTableId *string
	RouteSet     []*Route
}

type DescribeRouteTablesRequest struct{ Filters []*Filter }

type DescribeRouteTablesResponse struct {
	Response *struct{ RouteTableSet []*RouteTable }
}

type DeleteRoutesRequest struct {
	RouteTableId *string
	Routes       []*Route
}

type CreateRoutesRequest struct {
	RouteTableId *string
	Routes       []*Route
}

type RoutesResponse struct{}

func NewClientWithSecretId(id, secret, region string) (*Client, error) { return nil, errNotBuilt }

func NewDescribeRouteTablesRequest() *DescribeRouteTablesRequest { return &DescribeRouteTablesRequest{} }
func NewDeleteRoutesRequest() *DeleteRoutesRequest               { return &DeleteRoutesRequest{} }
func NewCreateRoutesRequest() *CreateRoutesRequest               { return &CreateRoutesRequest{} }

func (c *Client) DescribeRouteTables(*DescribeRouteTablesRequest) (*DescribeRouteTablesResponse, error) {
	return nil, errNotBuilt
}
func (c *Client) DeleteRoutes(*DeleteRoutesRequest) (*RoutesResponse, error) { return nil, errNotBuilt }
func (c *Client) CreateRoutes(*CreateRoutesRequest) (*RoutesResponse, error) { return nil, errNotBuilt }
