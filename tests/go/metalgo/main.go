// Command metalgo-check drives a metal-api (here: capms' simulator) through metal-stack's own Go
// client, metal-go, the way metalctl and the Go Cluster API provider call it: list, describe,
// find, allocate and free every entity capms and an operator touch. It prints one line per
// check and closes with "N passed, N failed"; it exits 1 when anything failed.
//
// Settings come from the environment: METAL_API_URL, METAL_API_HMAC, METAL_API_HMAC_AUTH_TYPE
// (as the Go provider reads them), and METALGO_PROJECT, METALGO_PARTITION, METALGO_SIZE,
// METALGO_IMAGE, METALGO_FIREWALL_IMAGE, METALGO_PUBLIC_NETWORK, METALGO_SSH_KEY.
package main

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	metalgo "github.com/metal-stack/metal-go"
	"github.com/metal-stack/metal-go/api/client/firewall"
	"github.com/metal-stack/metal-go/api/client/health"
	"github.com/metal-stack/metal-go/api/client/image"
	"github.com/metal-stack/metal-go/api/client/ip"
	"github.com/metal-stack/metal-go/api/client/machine"
	"github.com/metal-stack/metal-go/api/client/network"
	"github.com/metal-stack/metal-go/api/client/partition"
	"github.com/metal-stack/metal-go/api/client/project"
	"github.com/metal-stack/metal-go/api/client/size"
	"github.com/metal-stack/metal-go/api/client/sizeimageconstraint"
	"github.com/metal-stack/metal-go/api/client/user"
	"github.com/metal-stack/metal-go/api/client/version"
	"github.com/metal-stack/metal-go/api/models"
	"github.com/metal-stack/metal-lib/httperrors"
)

type settings struct {
	project, partition, size, image, firewallImage, publicNetwork, sshKey string
}

func env(name, fallback string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return fallback
}

type run struct {
	c              metalgo.Client
	s              settings
	passed, failed int
}

// check records one call: its error, or a failed expectation about its result.
func (r *run) check(name string, err error) bool {
	if err != nil {
		r.failed++
		fmt.Printf("FAIL %s: %v\n", name, describe(err))
		return false
	}
	r.passed++
	fmt.Printf("ok   %s\n", name)
	return true
}

// describe unwraps metal-go's typed default responses so a failure shows metal-api's message.
func describe(err error) string {
	var payload interface{ GetPayload() *httperrors.HTTPErrorResponse }
	if errors.As(err, &payload) && payload.GetPayload() != nil {
		p := payload.GetPayload()
		return fmt.Sprintf("%d %s", p.StatusCode, p.Message)
	}
	return err.Error()
}

// expectStatus passes when err is metal-api's error with the given status code.
func expectStatus(err error, code int) error {
	if err == nil {
		return fmt.Errorf("expected a %d error, the call succeeded", code)
	}
	var payload interface{ GetPayload() *httperrors.HTTPErrorResponse }
	if !errors.As(err, &payload) || payload.GetPayload() == nil {
		return fmt.Errorf("expected a %d error with metal-api's body, got %v", code, err)
	}
	if got := payload.GetPayload().StatusCode; got != code {
		return fmt.Errorf("expected %d, got %d %s", code, got, payload.GetPayload().Message)
	}
	return nil
}

func expect(ok bool, format string, args ...any) error {
	if ok {
		return nil
	}
	return fmt.Errorf(format, args...)
}

func main() {
	url := os.Getenv("METAL_API_URL")
	hmac := os.Getenv("METAL_API_HMAC")
	authType := env("METAL_API_HMAC_AUTH_TYPE", "Metal-Edit")
	if url == "" || hmac == "" {
		fmt.Fprintln(os.Stderr, "set METAL_API_URL and METAL_API_HMAC")
		os.Exit(2)
	}
	// The Go provider's constructor: metalgo.NewDriver(url, "", hmac, metalgo.AuthType(t)).
	c, err := metalgo.NewDriver(url, "", hmac, metalgo.AuthType(authType))
	if err != nil {
		fmt.Fprintf(os.Stderr, "metal-go driver: %v\n", err)
		os.Exit(2)
	}
	r := &run{c: c, s: settings{
		project:       env("METALGO_PROJECT", "00000000-0000-0000-0000-000000000001"),
		partition:     env("METALGO_PARTITION", "mini-lab"),
		size:          env("METALGO_SIZE", "v1-small-x86"),
		image:         env("METALGO_IMAGE", "debian-13"),
		firewallImage: env("METALGO_FIREWALL_IMAGE", "firewall-ubuntu-3.0"),
		publicNetwork: env("METALGO_PUBLIC_NETWORK", "internet-mini-lab"),
		sshKey:        env("METALGO_SSH_KEY", "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIKv3u7u7u7u7u7u7u7u7u7u7u7u7u7u7u7u7u7u7u7u7 metalgo@test"),
	}}
	r.service()
	r.masterdata()
	network := r.networks()
	if network != "" {
		r.ips(network)
		r.machines(network)
		r.firewalls(network)
		r.freeNetwork(network)
	}
	fmt.Printf("%d passed, %d failed\n", r.passed, r.failed)
	if r.failed > 0 {
		os.Exit(1)
	}
}

func (r *run) service() {
	v, err := r.c.Version().Info(version.NewInfoParams(), nil)
	if r.check("version info", err) {
		r.check("version names metal-api", expect(v.Payload.Name != nil && *v.Payload.Name != "", "empty name"))
	}
	_, err = r.c.Health().Health(health.NewHealthParams(), nil)
	r.check("health", err)
	me, err := r.c.User().GetMe(user.NewGetMeParams(), nil)
	if r.check("user me", err) {
		r.check("user me has a tenant", expect(me.Payload.Tenant != nil && *me.Payload.Tenant != "", "no tenant"))
	}
}

func (r *run) masterdata() {
	ps, err := r.c.Partition().ListPartitions(partition.NewListPartitionsParams(), nil)
	r.check("partition list", err)
	if err == nil {
		r.check("partition list has "+r.s.partition, expect(len(ps.Payload) > 0, "no partitions"))
	}
	_, err = r.c.Partition().FindPartition(partition.NewFindPartitionParams().WithID(r.s.partition), nil)
	r.check("partition describe", err)
	_, err = r.c.Partition().FindPartition(partition.NewFindPartitionParams().WithID("no-such-partition"), nil)
	r.check("partition describe unknown is 404", expectStatus(err, 404))
	capacity, err := r.c.Partition().PartitionCapacity(partition.NewPartitionCapacityParams().WithBody(&models.V1PartitionCapacityRequest{Projectid: &r.s.project}), nil)
	if r.check("partition capacity", err) {
		r.check("partition capacity counts servers", expect(len(capacity.Payload) > 0 && len(capacity.Payload[0].Servers) > 0, "no capacity rows"))
	}

	_, err = r.c.Size().ListSizes(size.NewListSizesParams(), nil)
	r.check("size list", err)
	_, err = r.c.Size().FindSize(size.NewFindSizeParams().WithID(r.s.size), nil)
	r.check("size describe", err)

	_, err = r.c.Sizeimageconstraint().ListSizeImageConstraints(sizeimageconstraint.NewListSizeImageConstraintsParams(), nil)
	r.check("size image constraint list", err)
	_, err = r.c.Sizeimageconstraint().FindSizeImageConstraint(sizeimageconstraint.NewFindSizeImageConstraintParams().WithID("no-such-size"), nil)
	r.check("size image constraint describe unknown is 404", expectStatus(err, 404))
	try := &models.V1SizeImageConstraintTryRequest{Size: &r.s.size, Image: &r.s.image}
	_, err = r.c.Sizeimageconstraint().TrySizeImageConstraint(sizeimageconstraint.NewTrySizeImageConstraintParams().WithBody(try), nil)
	r.check("size image constraint try is metal-api's admins' only", expectStatus(err, 403))

	_, err = r.c.Image().ListImages(image.NewListImagesParams(), nil)
	r.check("image list", err)
	found, err := r.c.Image().FindImages(image.NewFindImagesParams().WithBody(&models.V1ImageFindRequest{Features: []string{"machine"}}), nil)
	if r.check("image find by feature", err) {
		r.check("image find returns machine images", expect(len(found.Payload) > 0, "none found"))
	}
	latest, err := r.c.Image().FindLatestImage(image.NewFindLatestImageParams().WithID(r.s.image), nil)
	if r.check("image latest", err) {
		r.check("image latest resolves "+r.s.image, expect(strings.HasPrefix(*latest.Payload.ID, r.s.image), "got %s", *latest.Payload.ID))
		_, err = r.c.Image().FindImage(image.NewFindImageParams().WithID(*latest.Payload.ID), nil)
		r.check("image describe", err)
	}
	_, err = r.c.Image().QueryImagesByID(image.NewQueryImagesByIDParams().WithID(r.s.image), nil)
	r.check("image query", err)

	_, err = r.c.Project().ListProjects(project.NewListProjectsParams(), nil)
	r.check("project list", err)
	_, err = r.c.Project().FindProject(project.NewFindProjectParams().WithID(r.s.project), nil)
	r.check("project describe", err)
	_, err = r.c.Project().FindProjects(project.NewFindProjectsParams().WithBody(&models.V1ProjectFindRequest{ID: r.s.project}), nil)
	r.check("project find", err)
}

// networks allocates a private network as the Go provider does and returns its id.
func (r *run) networks() string {
	_, err := r.c.Network().ListNetworks(network.NewListNetworksParams(), nil)
	r.check("network list", err)
	_, err = r.c.Network().FindNetwork(network.NewFindNetworkParams().WithID(r.s.publicNetwork), nil)
	r.check("network describe", err)
	defaults, err := r.c.Network().FindNetworks(network.NewFindNetworksParams().WithBody(&models.V1NetworkFindRequest{
		Labels: map[string]string{"network.metal-stack.io/default": ""},
	}), nil)
	if r.check("network find by label", err) {
		r.check("network find returns the default network", expect(len(defaults.Payload) == 1, "found %d", len(defaults.Payload)))
	}
	allocated, err := r.c.Network().AllocateNetwork(network.NewAllocateNetworkParams().WithBody(&models.V1NetworkAllocateRequest{
		Name:        "metalgo-check",
		Description: "metalgo-check's private network",
		Partitionid: r.s.partition,
		Projectid:   r.s.project,
		Labels:      map[string]string{"metalgo.check/owner": "default.metalgo"},
	}), nil)
	if !r.check("network allocate", err) {
		return ""
	}
	id := *allocated.Payload.ID
	r.check("network allocate carves a child prefix", expect(len(allocated.Payload.Prefixes) == 1, "prefixes %v", allocated.Payload.Prefixes))
	return id
}

func (r *run) ips(networkID string) {
	_, err := r.c.IP().ListIPs(ip.NewListIPsParams(), nil)
	r.check("ip list", err)
	ephemeral := "ephemeral"
	allocated, err := r.c.IP().AllocateIP(ip.NewAllocateIPParams().WithBody(&models.V1IPAllocateRequest{
		Name: "metalgo-cp", Description: "metalgo-check control plane ip",
		Networkid: &r.s.publicNetwork, Projectid: &r.s.project, Type: &ephemeral,
		Tags: []string{"metalgo.check/owner=default.metalgo"},
	}), nil)
	if r.check("ip allocate", err) {
		address := *allocated.Payload.Ipaddress
		_, err = r.c.IP().FindIP(ip.NewFindIPParams().WithID(address), nil)
		r.check("ip describe", err)
		found, err := r.c.IP().FindIPs(ip.NewFindIPsParams().WithBody(&models.V1IPFindRequest{Tags: []string{"metalgo.check/owner=default.metalgo"}}), nil)
		if r.check("ip find by tag", err) {
			r.check("ip find returns the allocated ip", expect(len(found.Payload) == 1, "found %d", len(found.Payload)))
		}
		_, err = r.c.IP().FreeIP(ip.NewFreeIPParams().WithID(address), nil)
		r.check("ip free", err)
		_, err = r.c.IP().FindIP(ip.NewFindIPParams().WithID(address), nil)
		r.check("ip describe after free is 404", expectStatus(err, 404))
	}
	static := "static"
	specific, err := r.c.IP().AllocateSpecificIP(ip.NewAllocateSpecificIPParams().WithIP("127.100.0.200").WithBody(&models.V1IPAllocateRequest{
		Networkid: &r.s.publicNetwork, Projectid: &r.s.project, Type: &static,
	}), nil)
	if r.check("ip allocate specific", err) {
		_, err = r.c.IP().AllocateSpecificIP(ip.NewAllocateSpecificIPParams().WithIP("127.100.0.200").WithBody(&models.V1IPAllocateRequest{
			Networkid: &r.s.publicNetwork, Projectid: &r.s.project, Type: &static,
		}), nil)
		r.check("ip allocate specific twice is 409", expectStatus(err, 409))
		_, err = r.c.IP().FreeIP(ip.NewFreeIPParams().WithID(*specific.Payload.Ipaddress), nil)
		r.check("ip free static", err)
	}
	_, err = r.c.IP().AllocateIP(ip.NewAllocateIPParams().WithBody(&models.V1IPAllocateRequest{
		Networkid: &networkID, Projectid: &r.s.project, Type: &ephemeral,
	}), nil)
	if r.check("ip allocate in the private network", err) {
		// Freed with the network's prefixes below would fail while it holds an IP: free it.
		found, err := r.c.IP().FindIPs(ip.NewFindIPsParams().WithBody(&models.V1IPFindRequest{Networkid: networkID}), nil)
		if r.check("ip find by network", err) {
			for _, i := range found.Payload {
				_, err = r.c.IP().FreeIP(ip.NewFreeIPParams().WithID(*i.Ipaddress), nil)
				r.check("ip free private", err)
			}
		}
	}
}

func (r *run) allocation(networkID, name, imageID string) (*string, []*models.V1MachineAllocationNetwork) {
	auto := true
	return &imageID, []*models.V1MachineAllocationNetwork{
		{Networkid: &networkID, Autoacquire: &auto},
		{Networkid: &r.s.publicNetwork, Autoacquire: &auto},
	}
}

func (r *run) machines(networkID string) {
	_, err := r.c.Machine().ListMachines(machine.NewListMachinesParams(), nil)
	r.check("machine list", err)
	imageID, networks := r.allocation(networkID, "metalgo-worker", r.s.image)
	allocated, err := r.c.Machine().AllocateMachine(machine.NewAllocateMachineParams().WithBody(&models.V1MachineAllocateRequest{
		Name: "metalgo-worker", Hostname: "metalgo-worker", Description: "metalgo-check worker",
		Projectid: &r.s.project, Partitionid: &r.s.partition, Sizeid: &r.s.size, Imageid: imageID,
		Networks: networks, SSHPubKeys: []string{r.s.sshKey},
		UserData: "#cloud-config\nhostname: metalgo-worker\n",
		Tags:     []string{"metalgo.check/owner=default.metalgo-worker"},
	}), nil)
	if !r.check("machine allocate with user data and ssh keys", err) {
		return
	}
	id := *allocated.Payload.ID
	a := allocated.Payload.Allocation
	r.check("machine allocation keeps user data, ssh keys and hostname", expect(a != nil && a.UserData == "#cloud-config\nhostname: metalgo-worker\n" &&
		len(a.SSHPubKeys) == 1 && *a.Hostname == "metalgo-worker", "allocation %+v", a))
	got, err := r.c.Machine().FindMachine(machine.NewFindMachineParams().WithID(id), nil)
	if r.check("machine describe", err) {
		r.check("machine describe shows the event log", expect(got.Payload.Events != nil, "no events"))
	}
	found, err := r.c.Machine().FindMachines(machine.NewFindMachinesParams().WithBody(&models.V1MachineFindRequest{
		AllocationProject: r.s.project, Tags: []string{"metalgo.check/owner=default.metalgo-worker"},
	}), nil)
	if r.check("machine find by tag", err) {
		r.check("machine find returns the allocated machine", expect(len(found.Payload) == 1 && *found.Payload[0].ID == id, "found %d", len(found.Payload)))
	}
	r.waitPhonedHome(id)
	r.power(id)
	_, err = r.c.Machine().ListIssues(machine.NewListIssuesParams(), nil)
	r.check("machine issues list", err)
	issues, err := r.c.Machine().Issues(machine.NewIssuesParams().WithBody(&models.V1MachineIssuesRequest{
		ID: id, Omit: []string{}, Only: []string{}, Severity: ptr(""), LastErrorThreshold: ptr(int64(0)),
	}), nil)
	r.check("machine issues evaluate", err)
	if err == nil {
		r.check("machine issues evaluate names the machine", expect(len(issues.Payload) <= 1, "%d rows", len(issues.Payload)))
	}
	_, err = r.c.Machine().FreeMachine(machine.NewFreeMachineParams().WithID(id), nil)
	r.check("machine free", err)
	_, err = r.c.Machine().FindMachine(machine.NewFindMachineParams().WithID("no-such-machine"), nil)
	r.check("machine describe unknown is 404", expectStatus(err, 404))
}

// power cycles and reinstalls the machine as `metalctl machine power cycle` and `metalctl machine
// reinstall` do, and reads its BMC as `metalctl machine ipmi` and `metalctl machine issues` do.
func (r *run) power(id string) {
	cycled, err := r.c.Machine().MachineCycle(machine.NewMachineCycleParams().WithID(id).WithBody(struct{}{}), nil)
	if r.check("machine power cycle", err) {
		log := cycled.Payload.Events.Log
		r.check("machine power cycle writes Planned Reboot", expect(len(log) > 0 && *log[0].Event == "Planned Reboot", "events %+v", log))
	}
	r.waitPhonedHome(id)
	reinstalled, err := r.c.Machine().ReinstallMachine(machine.NewReinstallMachineParams().WithID(id).WithBody(&models.V1MachineReinstallRequest{
		ID: &id, Imageid: &r.s.image,
	}), nil)
	if r.check("machine reinstall", err) {
		a := reinstalled.Payload.Allocation
		r.check("machine reinstall keeps the allocation", expect(a != nil && a.Reinstall != nil && *a.Reinstall && *a.Hostname == "metalgo-worker", "allocation %+v", a))
	}
	r.waitPhonedHome(id)
	found, err := r.c.Machine().FindIPMIMachines(machine.NewFindIPMIMachinesParams().WithBody(&models.V1MachineFindRequest{ID: id}), nil)
	if r.check("machine ipmi find", err) {
		r.check("machine ipmi find shows a loopback BMC that is on", expect(len(found.Payload) == 1 && found.Payload[0].Ipmi != nil &&
			strings.HasPrefix(*found.Payload[0].Ipmi.Address, "127.") && *found.Payload[0].Ipmi.Powerstate == "ON", "found %+v", found.Payload))
	}
}

// waitPhonedHome polls the machine's events as `metalctl machine logs` shows them.
func (r *run) waitPhonedHome(id string) {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		m, err := r.c.Machine().FindMachine(machine.NewFindMachineParams().WithID(id), nil)
		if err == nil && m.Payload.Events != nil && len(m.Payload.Events.Log) > 0 && *m.Payload.Events.Log[0].Event == "Phoned Home" {
			r.check("machine logs reach Phoned Home", nil)
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	r.check("machine logs reach Phoned Home", errors.New("not within 30 s"))
}

func (r *run) firewalls(networkID string) {
	_, err := r.c.Firewall().ListFirewalls(firewall.NewListFirewallsParams(), nil)
	r.check("firewall list", err)
	imageID, networks := r.allocation(networkID, "metalgo-firewall", r.s.firewallImage)
	allocated, err := r.c.Firewall().AllocateFirewall(firewall.NewAllocateFirewallParams().WithBody(&models.V1FirewallCreateRequest{
		Name: "metalgo-firewall", Hostname: "metalgo-firewall", Description: "metalgo-check firewall",
		Projectid: &r.s.project, Partitionid: &r.s.partition, Sizeid: &r.s.size, Imageid: imageID,
		Networks: networks, SSHPubKeys: []string{r.s.sshKey},
		Tags: []string{"metalgo.check/owner=default.metalgo-firewall"},
		FirewallRules: &models.V1FirewallRules{
			Egress:  []*models.V1FirewallEgressRule{{Comment: "allow https", Ports: []int32{443}, Protocol: "tcp", To: []string{"0.0.0.0/0"}}},
			Ingress: []*models.V1FirewallIngressRule{{Comment: "allow ssh", Ports: []int32{22}, Protocol: "tcp", From: []string{"0.0.0.0/0"}}},
		},
	}), nil)
	if !r.check("firewall allocate with rules", err) {
		return
	}
	id := *allocated.Payload.ID
	fw, err := r.c.Firewall().FindFirewall(firewall.NewFindFirewallParams().WithID(id), nil)
	if r.check("firewall describe", err) {
		a := fw.Payload.Allocation
		r.check("firewall keeps its rules", expect(a != nil && a.FirewallRules != nil && len(a.FirewallRules.Egress) == 1 && len(a.FirewallRules.Ingress) == 1, "rules %+v", a))
	}
	found, err := r.c.Firewall().FindFirewalls(firewall.NewFindFirewallsParams().WithBody(&models.V1FirewallFindRequest{
		AllocationProject: r.s.project, PartitionID: r.s.partition, Tags: []string{"metalgo.check/owner=default.metalgo-firewall"},
	}), nil)
	if r.check("firewall find by tag", err) {
		r.check("firewall find returns the firewall", expect(len(found.Payload) == 1, "found %d", len(found.Payload)))
	}
	// metalctl firewall delete frees the machine.
	_, err = r.c.Machine().FreeMachine(machine.NewFreeMachineParams().WithID(id), nil)
	r.check("firewall free", err)
}

// freeNetwork frees the private network once its machines' IPs are released (metal-api refuses
// while a prefix still holds IPs).
func (r *run) freeNetwork(id string) {
	deadline := time.Now().Add(30 * time.Second)
	var err error
	for time.Now().Before(deadline) {
		_, err = r.c.Network().FreeNetwork(network.NewFreeNetworkParams().WithID(id), nil)
		if err == nil {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	r.check("network free", err)
	_, err = r.c.Network().FindNetwork(network.NewFindNetworkParams().WithID(id), nil)
	r.check("network describe after free is 404", expectStatus(err, 404))
}

func ptr[T any](v T) *T { return &v }
