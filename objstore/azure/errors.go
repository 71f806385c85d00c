package azure

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/bloberror"

	"github.com/rollstore/rollstore/objstore"
)

// op names the operation an error came from; mapError needs it where one
// status means different things to different operations.
type op string

const (
	opGet             op = "get"
	opRead            op = "read" // resuming a download body
	opHead            op = "head"
	opPut             op = "put"
	opDelete          op = "delete"
	opDeleteBatch     op = "delete batch"
	opList            op = "list"
	opCheck           op = "check"
	opCreateContainer op = "create container"
	opAcquireLease    op = "acquire lease"
	opRenewLease      op = "renew lease"
	opReleaseLease    op = "release lease"
)

// containerOp reports whether op addresses the container rather than a
// blob, so that a 404 can only mean the container is missing.
func (o op) containerOp() bool {
	return o == opList || o == opCheck || o == opCreateContainer || o == opDeleteBatch
}

// mapError is the one place Azure failures become objstore sentinels. The
// result wraps both the sentinel and the SDK error, so errors.Is works on
// the former and errors.As still reaches *azcore.ResponseError for detail.
func mapError(o op, key string, err error) error {
	if err == nil {
		return nil
	}
	where := "azure " + string(o)
	if key != "" {
		where += " " + key
	}
	sentinel := classify(o, err)
	if sentinel == nil {
		return fmt.Errorf("%s: %w", where, err)
	}
	return fmt.Errorf("%w: %s: %w", sentinel, where, err)
}

// errorf builds an error for a failure detected here rather than by the
// service, in the same shape as mapError's.
func errorf(sentinel error, o op, key, format string, args ...any) error {
	return fmt.Errorf("%w: azure %s %s: %s", sentinel, o, key, fmt.Sprintf(format, args...))
}

func classify(o op, err error) error {
	if transportFailure(err) {
		return objstore.ErrUnavailable
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return nil
	}
	if _, ok := errors.AsType[*credentialError](err); ok {
		return objstore.ErrAuth
	}
	re, ok := errors.AsType[*azcore.ResponseError](err)
	if !ok {
		return nil
	}
	// The error code comes from the x-ms-error-code header, which the
	// service also sends on HEAD responses that have no body to carry it;
	// statuses are the fallback when it is absent.
	code := bloberror.Code(re.ErrorCode)
	if s := classifyLease(o, code, re.StatusCode); s != nil {
		return s
	}
	switch code {
	case bloberror.ContainerNotFound, bloberror.ContainerBeingDeleted:
		return objstore.ErrContainerNotFound
	case bloberror.BlobNotFound:
		return objstore.ErrNotFound
	case bloberror.BlobAlreadyExists:
		return objstore.ErrPrecondition
	case bloberror.ConditionNotMet:
		return conditionFailed(o)
	case bloberror.InvalidRange:
		return objstore.ErrInvalidRange
	case bloberror.AuthenticationFailed, bloberror.AuthorizationFailure,
		bloberror.AuthorizationPermissionMismatch, bloberror.AuthorizationSourceIPMismatch,
		bloberror.AuthorizationProtocolMismatch, bloberror.AuthorizationResourceTypeMismatch,
		bloberror.AuthorizationServiceMismatch, bloberror.InsufficientAccountPermissions,
		bloberror.AccountIsDisabled, bloberror.InvalidAuthenticationInfo, bloberror.NoAuthenticationInformation:
		return objstore.ErrAuth
	case bloberror.ServerBusy:
		return objstore.ErrThrottled
	case bloberror.OperationTimedOut:
		return objstore.ErrUnavailable
	case bloberror.LeaseIDMissing:
		// A write or delete of a blob someone holds a lease on (the
		// object API never sends a lease id).
		return objstore.ErrLeased
	}
	switch re.StatusCode {
	case http.StatusNotFound:
		if o.containerOp() {
			return objstore.ErrContainerNotFound
		}
		return objstore.ErrNotFound
	case http.StatusPreconditionFailed:
		return conditionFailed(o)
	case http.StatusRequestedRangeNotSatisfiable:
		return objstore.ErrInvalidRange
	case http.StatusUnauthorized, http.StatusForbidden:
		return objstore.ErrAuth
	case http.StatusTooManyRequests, http.StatusServiceUnavailable:
		return objstore.ErrThrottled
	case http.StatusBadGateway, http.StatusGatewayTimeout:
		return objstore.ErrUnavailable
	}
	return nil
}

// transportFailure reports whether err is the transport's: no answer from
// the store at all (refused, reset, unreachable, unresolvable, timed out on
// our side). The caller's own context ending is not one: the SDK reports
// that bare, and a dial it cancelled says so.
func transportFailure(err error) bool {
	if errors.Is(err, context.Canceled) {
		return false
	}
	if _, ok := errors.AsType[*url.Error](err); ok {
		return true
	}
	if _, ok := errors.AsType[*net.OpError](err); ok {
		return true
	}
	_, ok := errors.AsType[*net.DNSError](err)
	return ok
}

// conditionFailed maps a failed access condition. Puts are the only
// operation rollstore conditions, except for the If-Match the SDK adds when
// it resumes a broken download: there a failure means the blob being read
// was replaced, so the bytes already returned belong to an object that no
// longer exists. That is reported as ErrNotFound, the case the read path
// already retries, and never stitched to the new object's bytes.
func conditionFailed(o op) error {
	if o == opRead || o == opGet {
		return objstore.ErrNotFound
	}
	return objstore.ErrPrecondition
}

// classifyLease maps the outcomes that mean something particular to a lease
// operation, and returns nil for the rest, which classify then maps like
// any other request's. A missing container keeps its own sentinel: it is
// not a lost lease, and not someone else's.
func classifyLease(o op, code bloberror.Code, status int) error {
	if o != opAcquireLease && o != opRenewLease && o != opReleaseLease {
		return nil
	}
	switch code {
	case bloberror.ContainerNotFound, bloberror.ContainerBeingDeleted:
		return nil
	}
	switch o {
	case opAcquireLease:
		// BlobNotFound stays ErrNotFound: AcquireLease then creates the
		// blob. Every conflict means an unexpired lease of someone else's,
		// or one being broken, which cannot be taken until it ends.
		if code == bloberror.LeaseAlreadyPresent || code == bloberror.LeaseIsBreakingAndCannotBeAcquired ||
			status == http.StatusConflict {
			return objstore.ErrLeased
		}
	case opRenewLease, opReleaseLease:
		// The lease id no longer matches (it expired and was taken, or the
		// blob was written or deleted after it expired), the lease was
		// released or broken, or the blob is gone with it. Azurite answers
		// LeaseIdMismatchWithLeaseOperation where Azure documents
		// LeaseNotPresentWithLeaseOperation, so the codes are not told
		// apart: all of them mean the lease is not ours.
		switch code {
		case bloberror.LeaseIDMismatchWithLeaseOperation, bloberror.LeaseNotPresentWithLeaseOperation,
			bloberror.LeaseLost, bloberror.LeaseIsBrokenAndCannotBeRenewed,
			bloberror.LeaseIsBreakingAndCannotBeChanged, bloberror.LeaseAlreadyBroken,
			bloberror.BlobNotFound:
			return objstore.ErrLeaseLost
		}
		switch status {
		case http.StatusConflict, http.StatusPreconditionFailed:
			return objstore.ErrLeaseLost
		}
	}
	return nil
}
