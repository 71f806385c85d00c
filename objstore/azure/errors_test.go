package azure

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"syscall"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"

	"github.com/rollstore/rollstore/objstore"
)

// TestMapError covers the mapping table without a server, including the
// cases Azurite cannot produce.
func TestMapError(t *testing.T) {
	resp := func(status int, code string) error {
		return &azcore.ResponseError{StatusCode: status, ErrorCode: code}
	}
	for _, tc := range []struct {
		op   op
		err  error
		want error // nil: no sentinel
	}{
		{opGet, resp(404, "BlobNotFound"), objstore.ErrNotFound},
		{opHead, resp(404, ""), objstore.ErrNotFound}, // HEAD without x-ms-error-code
		{opHead, resp(404, "ContainerNotFound"), objstore.ErrContainerNotFound},
		{opList, resp(404, ""), objstore.ErrContainerNotFound},
		{opCheck, resp(404, ""), objstore.ErrContainerNotFound},
		{opDeleteBatch, resp(404, ""), objstore.ErrContainerNotFound},
		{opPut, resp(409, "ContainerBeingDeleted"), objstore.ErrContainerNotFound},
		{opPut, resp(409, "BlobAlreadyExists"), objstore.ErrPrecondition},
		{opPut, resp(412, "LeaseIdMissing"), objstore.ErrLeased}, // writing a leased blob
		{opDelete, resp(412, "LeaseIdMissing"), objstore.ErrLeased},
		{opAcquireLease, resp(409, "LeaseAlreadyPresent"), objstore.ErrLeased},
		{opAcquireLease, resp(409, "LeaseIsBreakingAndCannotBeAcquired"), objstore.ErrLeased},
		{opAcquireLease, resp(409, ""), objstore.ErrLeased},
		{opAcquireLease, resp(404, "BlobNotFound"), objstore.ErrNotFound}, // AcquireLease creates the blob
		{opAcquireLease, resp(404, "ContainerNotFound"), objstore.ErrContainerNotFound},
		{opAcquireLease, resp(409, "ContainerBeingDeleted"), objstore.ErrContainerNotFound},
		{opAcquireLease, resp(400, "InvalidHeaderValue"), nil},
		{opRenewLease, resp(409, "LeaseIdMismatchWithLeaseOperation"), objstore.ErrLeaseLost},
		{opRenewLease, resp(409, "LeaseNotPresentWithLeaseOperation"), objstore.ErrLeaseLost},
		{opRenewLease, resp(409, "LeaseIsBrokenAndCannotBeRenewed"), objstore.ErrLeaseLost},
		{opRenewLease, resp(412, "LeaseLost"), objstore.ErrLeaseLost},
		{opRenewLease, resp(412, ""), objstore.ErrLeaseLost},
		{opRenewLease, resp(409, ""), objstore.ErrLeaseLost},
		{opRenewLease, resp(404, "BlobNotFound"), objstore.ErrLeaseLost}, // deleted after it expired
		{opRenewLease, resp(404, "ContainerNotFound"), objstore.ErrContainerNotFound},
		{opRenewLease, resp(403, "AuthenticationFailed"), objstore.ErrAuth},
		{opRenewLease, resp(503, "ServerBusy"), objstore.ErrThrottled},
		{opRenewLease, resp(500, "InternalError"), nil},
		{opReleaseLease, resp(409, "LeaseNotPresentWithLeaseOperation"), objstore.ErrLeaseLost},
		{opReleaseLease, resp(409, "LeaseIdMismatchWithLeaseOperation"), objstore.ErrLeaseLost},
		{opPut, resp(412, "ConditionNotMet"), objstore.ErrPrecondition},
		{opPut, resp(412, ""), objstore.ErrPrecondition},
		{opRead, resp(412, "ConditionNotMet"), objstore.ErrNotFound}, // resumed read of a replaced blob
		{opRead, resp(404, "BlobNotFound"), objstore.ErrNotFound},
		{opGet, resp(416, "InvalidRange"), objstore.ErrInvalidRange},
		{opGet, resp(416, ""), objstore.ErrInvalidRange},
		{opGet, resp(403, "AuthenticationFailed"), objstore.ErrAuth},
		{opGet, resp(403, "AuthorizationPermissionMismatch"), objstore.ErrAuth},
		{opHead, resp(403, ""), objstore.ErrAuth},
		{opGet, resp(401, ""), objstore.ErrAuth},
		{opGet, &credentialError{errors.New("AADSTS700016")}, objstore.ErrAuth},
		{opGet, fmt.Errorf("pipeline: %w", &credentialError{errors.New("no token file")}), objstore.ErrAuth},
		{opGet, resp(503, "ServerBusy"), objstore.ErrThrottled},
		{opGet, resp(503, ""), objstore.ErrThrottled},
		{opGet, resp(429, ""), objstore.ErrThrottled},
		{opGet, resp(500, "InternalError"), nil},
		{opGet, resp(400, "InvalidHeaderValue"), nil},
		{opGet, context.Canceled, nil},
		{opGet, context.DeadlineExceeded, nil}, // the caller's deadline, reported bare by the SDK
		{opGet, errors.New("connection reset"), nil},
		// No answer from the store at all.
		{opGet, &url.Error{Op: "Get", URL: "http://x", Err: &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}}, objstore.ErrUnavailable},
		{opPut, &url.Error{Op: "Put", URL: "http://x", Err: &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}}, objstore.ErrUnavailable},
		{opList, &url.Error{Op: "Get", URL: "http://x", Err: &net.DNSError{Err: "no such host", Name: "x", IsNotFound: true}}, objstore.ErrUnavailable},
		{opRead, &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}, objstore.ErrUnavailable},
		{opCheck, &url.Error{Op: "Get", URL: "http://x", Err: &net.OpError{Op: "dial", Net: "tcp", Err: os.ErrDeadlineExceeded}}, objstore.ErrUnavailable},
		{opGet, &url.Error{Op: "Get", URL: "http://x", Err: context.Canceled}, nil}, // the caller left
		{opGet, resp(502, ""), objstore.ErrUnavailable},
		{opGet, resp(504, ""), objstore.ErrUnavailable},
		{opPut, resp(500, "OperationTimedOut"), objstore.ErrUnavailable},
	} {
		got := mapError(tc.op, "k", tc.err)
		if !errors.Is(got, tc.err) {
			t.Errorf("%s %v: result %v does not wrap the original", tc.op, tc.err, got)
		}
		if tc.want != nil && !errors.Is(got, tc.want) {
			t.Errorf("%s %v: got %v, want %v", tc.op, tc.err, got, tc.want)
		}
		for _, s := range []error{objstore.ErrNotFound, objstore.ErrPrecondition, objstore.ErrContainerNotFound,
			objstore.ErrAuth, objstore.ErrThrottled, objstore.ErrInvalidRange, objstore.ErrLeased, objstore.ErrLeaseLost,
			objstore.ErrUnavailable} {
			if s != tc.want && errors.Is(got, s) {
				t.Errorf("%s %v: got %v, which also matches %v", tc.op, tc.err, got, s)
			}
		}
	}
	if mapError(opGet, "k", nil) != nil {
		t.Error("mapError(nil) != nil")
	}
}
