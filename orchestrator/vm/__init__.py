"""The netem guest: a stock Debian kernel under QEMU, to run what needs a kernel this machine lacks.

Kernels without sch_netem (the CI machines among them) can only run peerlab's transport and delay-line
modes. The guest boots Debian's own kernel (every qdisc built as a module) with software emulation
(TCG: no KVM needed), shares the checkout and its Python interpreter into it over 9p, runs one command
as root and hands back that command's exit status.

    image.py   builds the guest from Debian packages (kernel, root filesystem, initramfs), cached
    guest.py   boots it, runs a command in it, reads the result from its console

May import: node.paths (the cache) and the standard library; nothing else of peerlab (cli/vm.py and
`doctor` import it).
"""
