// A file descriptor and a few bytes over a Unix socket (SCM_RIGHTS): how the IPC tests pass a
// pool's handle and an allocation's export data from one process to another.
#pragma once

#include <sys/socket.h>
#include <sys/uio.h>

#include <cstddef>
#include <cstring>
#include <stdexcept>

namespace poolkit::test {

// A message of `size` bytes with room for one descriptor.
struct descriptor_message {
    iovec payload;
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))]{};
    msghdr message{};

    descriptor_message(void* bytes, std::size_t size) : payload{bytes, size} {
        message.msg_iov = &payload;
        message.msg_iovlen = 1;
        message.msg_control = control;
        message.msg_controllen = sizeof control;
    }
    descriptor_message(const descriptor_message&) = delete;
    descriptor_message& operator=(const descriptor_message&) = delete;
};

inline void send_descriptor(int socket, int descriptor, const void* bytes, std::size_t size) {
    descriptor_message m(const_cast<void*>(bytes), size);
    cmsghdr* header = CMSG_FIRSTHDR(&m.message);
    header->cmsg_level = SOL_SOCKET;
    header->cmsg_type = SCM_RIGHTS;
    header->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(header), &descriptor, sizeof(int));
    if (sendmsg(socket, &m.message, 0) != static_cast<ssize_t>(size)) throw std::runtime_error("sendmsg failed");
}

// Returns the descriptor received (the caller closes it); fills `bytes` with `size` bytes.
inline int receive_descriptor(int socket, void* bytes, std::size_t size) {
    descriptor_message m(bytes, size);
    if (recvmsg(socket, &m.message, MSG_WAITALL) != static_cast<ssize_t>(size)) throw std::runtime_error("recvmsg failed");
    const cmsghdr* header = CMSG_FIRSTHDR(&m.message);
    if (header == nullptr || header->cmsg_type != SCM_RIGHTS) throw std::runtime_error("no descriptor received");
    int descriptor = -1;
    std::memcpy(&descriptor, CMSG_DATA(header), sizeof(int));
    return descriptor;
}

}  // namespace poolkit::test
