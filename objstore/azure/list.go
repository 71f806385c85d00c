package azure

import (
	"context"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"

	"github.com/rollstore/rollstore/objstore"
)

// List calls fn for every key under prefix in lexical order, one page of
// the service's listing at a time.
func (b *Bucket) List(ctx context.Context, prefix string, opts objstore.ListOptions, fn func(objstore.Entry) error) error {
	if err := objstore.ValidatePrefix(prefix); err != nil {
		return err
	}
	var p *string
	if prefix != "" {
		p = &prefix
	}
	if !opts.Delimited {
		pager := b.client.NewListBlobsFlatPager(&container.ListBlobsFlatOptions{Prefix: p})
		for pager.More() {
			page, err := pager.NextPage(ctx)
			if err != nil {
				return mapError(opList, prefix, err)
			}
			if page.Segment == nil {
				continue
			}
			for _, it := range page.Segment.BlobItems {
				if err := emit(ctx, fn, blobEntry(it)); err != nil {
					return err
				}
			}
		}
		return nil
	}

	pager := b.client.NewListBlobsHierarchyPager("/", &container.ListBlobsHierarchyOptions{Prefix: p})
	for pager.More() {
		page, err := pager.NextPage(ctx)
		if err != nil {
			return mapError(opList, prefix, err)
		}
		if page.Segment == nil {
			continue
		}
		// The service returns a page's blobs and prefixes as two lists,
		// each sorted; a page covers one contiguous run of names, so
		// merging within the page keeps the whole listing in order.
		blobs, prefixes := page.Segment.BlobItems, page.Segment.BlobPrefixes
		for len(blobs) > 0 || len(prefixes) > 0 {
			var e objstore.Entry
			if len(prefixes) == 0 || len(blobs) > 0 && deref(blobs[0].Name) < deref(prefixes[0].Name) {
				e, blobs = blobEntry(blobs[0]), blobs[1:]
			} else {
				e, prefixes = objstore.Entry{Key: deref(prefixes[0].Name), IsPrefix: true}, prefixes[1:]
			}
			if err := emit(ctx, fn, e); err != nil {
				return err
			}
		}
	}
	return nil
}

func emit(ctx context.Context, fn func(objstore.Entry) error, e objstore.Entry) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return fn(e)
}

func blobEntry(it *container.BlobItem) objstore.Entry {
	e := objstore.Entry{Key: deref(it.Name)}
	if p := it.Properties; p != nil {
		if p.ContentLength != nil {
			e.Size = *p.ContentLength
		}
		if p.LastModified != nil {
			e.LastModified = *p.LastModified
		}
	}
	return e
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
