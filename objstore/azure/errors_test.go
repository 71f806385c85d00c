package azure

import (
	"context"
	"errors"
	"fmt"
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
		{opGet, errors.New("connection reset"), nil},
	} {
		got := mapError(tc.op, "k", tc.err)
		if !errors.Is(got, tc.err) {
			t.Errorf("%s %v: result %v does not wrap the original", tc.op, tc.err, got)
		}
		if tc.want != nil && !errors.Is(got, tc.want) {
			t.Errorf("%s %v: got %v, want %v", tc.op, tc.err, got, tc.want)
		}
		for _, s := range []error{objstore.ErrNotFound, objstore.ErrPrecondition, objstore.ErrContainerNotFound,
			objstore.ErrAuth, objstore.ErrThrottled, objstore.ErrInvalidRange, objstore.ErrLeased, objstore.ErrLeaseLost} {
			if s != tc.want && errors.Is(got, s) {
				t.Errorf("%s %v: got %v, which also matches %v", tc.op, tc.err, got, s)
			}
		}
	}
	if mapError(opGet, "k", nil) != nil {
		t.Error("mapError(nil) != nil")
	}
}
