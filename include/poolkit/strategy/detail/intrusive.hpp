// The one door through which Boost.Intrusive reaches the strategies, with our names for its options.
//
// Every container here links host-side bookkeeping nodes; none ever stores a byte in the memory a
// strategy manages. Hooks use normal_link (no unlink-on-destroy, no safe-mode writes): strategies
// track membership themselves and check it in check_invariants(). Sizes are constant-time so that
// the checks can compare counts.
#pragma once

#include <boost/intrusive/list.hpp>
#include <boost/intrusive/set.hpp>

namespace poolkit::detail::intrusive {

namespace bi = boost::intrusive;

using link_mode = bi::link_mode<bi::normal_link>;

// A node that sits in one ordered container (set or multiset) at a time, named by Tag.
template <class Tag>
using set_hook = bi::set_base_hook<bi::tag<Tag>, link_mode>;

// A node that sits in one list at a time, named by Tag.
template <class Tag>
using list_hook = bi::list_base_hook<bi::tag<Tag>, link_mode>;

// Ordered by Compare, keys unique. Compare may also compare nodes with lookup keys.
template <class Node, class Tag, class Compare>
using set = bi::set<Node, bi::base_hook<set_hook<Tag>>, bi::compare<Compare>, bi::constant_time_size<true>>;

// Ordered by Compare, equal keys allowed.
template <class Node, class Tag, class Compare>
using multiset = bi::multiset<Node, bi::base_hook<set_hook<Tag>>, bi::compare<Compare>, bi::constant_time_size<true>>;

// Doubly linked, in the order the strategy keeps.
template <class Node, class Tag>
using list = bi::list<Node, bi::base_hook<list_hook<Tag>>, bi::constant_time_size<true>>;

}  // namespace poolkit::detail::intrusive
